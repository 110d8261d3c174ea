#!/usr/bin/env python3
"""The findings of many runs in one table: every failing case of the results given, grouped by
op, dtype, verdict and detector, each group with its smallest failing case, the nearest case
that passed beside it (one dimension or integer parameter moved), whether only memcheck saw
it (or named a fault the native run saw), and what upstream said of it in the confirm runs
given (scripts/confirm-upstream.py's confirm.jsonl files).

    scripts/findings.py --results R.jsonl ... [--memcheck M.jsonl ...] [--confirm C.jsonl ...]
                        [--not-shown OUT.jsonl]

A later results file's record of a case replaces an earlier one's (give the oldest first).
`resource-limit` (a case too big for the device it ran on) is not a finding. A memcheck
record counts where its verdict or detector differs from the native one of the same case. A
memcheck group is shown by upstream's runs under memcheck (each side's word is memcheck's error
count: errors fail, none pass; its passing side is the one confirm-upstream.py paired with the
failure), a native group by native runs only.
Writes markdown to stdout: a summary, then one row per group, the groups upstream has not
shown first. --not-shown writes what the next upstream runs need, for device-check.sh's
CONFIRM_EXTRA: the smallest failing case of each group not yet shown on both sides (a memcheck
group's memcheck record, which confirm-upstream.py runs under memcheck on both sides; a case
once for each kind of group it fails in), then every passing record, where
confirm-upstream.py finds each one's passing side.
"""
import argparse
import json
import math
import re
from collections import defaultdict

from pairing import Passing

OK = {"pass", "unsupported", "skipped"}
NOT_FINDINGS = OK | {"resource-limit"}

ap = argparse.ArgumentParser()
ap.add_argument("--results", nargs="+", required=True, help="native results, oldest first")
ap.add_argument("--memcheck", nargs="*", default=[], help="results under memcheck")
ap.add_argument("--confirm", nargs="*", default=[], help="confirm-upstream.py's confirm.jsonl files")
ap.add_argument("--not-shown", help="write the groups' smallest failing cases not yet shown upstream, and the passing records")
a = ap.parse_args()


def load(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                yield json.loads(line)


def elements(c):
    return math.prod(max(1, int(d)) for d in c["ne"])


def label(c):
    ne = ",".join(str(d) for d in c["ne"])
    p = c.get("params") or {}
    return f"`[{ne}]`" + (" " + " ".join(f"{k}={v}" for k, v in sorted(p.items())) if p else "")


native = {}
for p in a.results:
    for r in load(p):
        native[r["id"]] = r
memcheck = {}
for p in a.memcheck:
    for r in load(p):
        memcheck[r["id"]] = r

# The nearest passing case (scripts/pairing.py, as confirm-upstream.py pairs them): a native
# group's among the native passes, a memcheck group's among the passes under memcheck.
PASSING = Passing(native.values())
PASSING_MC = Passing([r for r in memcheck.values() if r["verdict"] == "pass"])


def said(u):
    """FAIL or PASS, from test-backend-ops' words or the C repro's ("C repro rc=1 FAIL: ..."). A
    run under memcheck ("... under memcheck, memcheck: 3 errors") fails where memcheck reported
    errors and passes where it reported none, whatever the program's own exit."""
    m = re.search(r"under memcheck.*memcheck: (\d+) errors", u)
    if m:
        word = "FAIL" if int(m.group(1)) > 0 else "PASS"
        return ("C repro " + word) if u.startswith("C repro") else word
    if u.startswith("C repro"):
        m = re.search(r"rc=-?\d+ (FAIL|PASS)", u)
        return ("C repro " + m.group(1)) if m else u[:40]
    return "FAIL" if u.startswith("FAIL") else "PASS" if u.startswith("PASS") else u.split(",")[0][:40]


# What upstream said, by whether it ran under memcheck, case id and side: test-backend-ops'
# words, and the standalone C repro's where one ran (a layout upstream's constructor cannot
# express, or what memcheck alone saw: the repro run under memcheck). A memcheck group is shown
# by runs under memcheck, a native group by native runs: one case can be both.
upstream = {False: defaultdict(dict), True: defaultdict(dict)}
c_repro = {False: defaultdict(dict), True: defaultdict(dict)}
paired = {False: {}, True: {}}
for p in a.confirm:
    for r in load(p):
        mode = bool(r.get("memcheck"))
        # A run's FAIL or PASS is kept over another's timeout or tool failure.
        u = str(r.get("upstream") or "")
        if u and not u.startswith("not run") and (said(u) in ("FAIL", "PASS") or r["side"] not in upstream[mode][r["id"]]):
            upstream[mode][r["id"]][r["side"]] = u
        c = str(r.get("c_repro") or "")
        if c.startswith("C repro") and (said(c).endswith(("FAIL", "PASS")) or r["side"] not in c_repro[mode][r["id"]]):
            c_repro[mode][r["id"]][r["side"]] = c
        # The passing side confirm-upstream.py ran for a failing case (its row's "pair").
        if r["side"] == "pass" and r.get("pair") and "case" in r:
            paired[mode].setdefault(r["pair"], []).append(r)


def shown_for(i, side, mode):
    """The side's strongest word among the runs of `mode` (under memcheck or not),
    test-backend-ops' before the C repro's: FAIL for a failing side, PASS for a passing one,
    else whatever either said."""
    t, c = upstream[mode].get(i, {}).get(side), c_repro[mode].get(i, {}).get(side)
    want = "FAIL" if side == "fail" else "PASS"
    for w in (t, c):
        if w and said(w).endswith(want):
            return said(w), w
    w = t or c
    return (said(w), w) if w else (None, None)


findings = defaultdict(list)
for r in native.values():
    if r["verdict"] not in NOT_FINDINGS:
        findings[(r["case"]["op"], r["case"]["dtype"], r["verdict"], r.get("detector"), False)].append(r)
for i, r in memcheck.items():
    n = native.get(i)
    if r["verdict"] in NOT_FINDINGS or r["verdict"] == "timeout":
        continue
    if n is None or (n["verdict"], n.get("detector")) != (r["verdict"], r.get("detector")):
        findings[(r["case"]["op"], r["case"]["dtype"], r["verdict"], r.get("detector"), True)].append(r)


def rank_of(status):
    """Both sides shown (0), the failing side shown failing (1), anything else (2)."""
    s = status.replace("C repro ", "")
    return {"FAIL / PASS": 0, "FAIL": 1}.get(s, 2)


rows = []
for (op, dtype, verdict, detector, mc_only), rs in findings.items():
    rs.sort(key=lambda r: elements(r["case"]))
    first = rs[0]
    passing = PASSING_MC if mc_only else PASSING

    def pass_side(r):
        """The passing side upstream ran for `r` (its confirm rows' pair), else the nearest
        passing case kedge ran (under memcheck for a memcheck group, where one ran)."""
        ran = paired[mc_only].get(r["id"])
        if ran:
            return min(ran, key=lambda o: shown_for(o["id"], "pass", mc_only)[0] != "PASS")
        return passing.nearest(r["case"]) or PASSING.nearest(r["case"])

    other = pass_side(first)
    # Upstream: the best any case of the group got, both sides shown first.
    shown, words = "not run", ""
    for r in rs:
        f, fw = shown_for(r["id"], "fail", mc_only)
        if not f:
            continue
        o = pass_side(r)
        pu = shown_for(o["id"], "pass", mc_only)[0] if o else None
        status = f + (" / " + pu if pu else "")
        f = fw
        if shown == "not run" or rank_of(status) < rank_of(shown):
            shown, words = status, f"{label(r['case'])}: {f[:80]}"
    rows.append((op, dtype, verdict, detector, mc_only, rs, first, other, shown, words))


def alone(rs):
    """Whether only memcheck saw a memcheck group's cases: yes where each passed natively (or
    had no native run), else what the native runs said (memcheck named a fault they saw)."""
    said = [native[r["id"]]["verdict"] if r["id"] in native else "pass" for r in rs]
    passed = said.count("pass")
    words = ", ".join(sorted(set(said)))
    if passed == len(rs):
        return "yes"
    if passed == 0:
        return f"no (native: {words})"
    return f"{passed} of {len(rs)} (native: {words})"


# Not run upstream first, then other words, the failing side alone, both sides.
rows.sort(key=lambda x: (0 if x[8] == "not run" else 3 - rank_of(x[8]), x[0], x[1], x[2]))
n_groups = len(rows)
both = sum(1 for x in rows if rank_of(x[8]) == 0)
fail_only = sum(1 for x in rows if rank_of(x[8]) == 1)
none = sum(1 for x in rows if x[8] == "not run")
print(f"{n_groups} findings (op, dtype, verdict, detector) over {sum(len(x[5]) for x in rows)} failing cases, "
      f"{len({(x[0], x[1]) for x in rows})} (op, dtype) pairs:")
print(f"- shown upstream on both sides (the failing side fails, the passing side passes): {both}")
print(f"- the failing side shown failing, its passing side not run upstream: {fail_only}")
print(f"- other upstream words (upstream passes the failing side, or a tool's own failure): {n_groups - both - fail_only - none}")
print(f"- not run upstream: {none}")
print()
print("| op | dtype | verdict (detector) | cases | smallest failing case | nearest passing case | memcheck alone | upstream |")
print("|---|---|---|---:|---|---|---|---|")
for op, dtype, verdict, detector, mc_only, rs, first, other, shown, words in rows:
    up = shown + (f" ({words})" if words else "")
    print(f"| {op} | {dtype} | {verdict} ({detector}) | {len(rs)} | {label(first['case'])} | "
          f"{label(other['case']) if other else 'none ran'} | {alone(rs) if mc_only else ''} | {up.replace('|', '/')} |")

if a.not_shown:
    with open(a.not_shown, "w") as f:
        # Smallest first: an upstream run's time grows with the case (75 to 380 s a side at
        # 2^31 elements), so a time-limited confirm run shows the most groups this way.
        # A memcheck group's record keeps its detector, so confirm-upstream.py runs both sides
        # under memcheck; a native group's case is run natively, also where a memcheck group
        # has the same case (each is shown only by runs of its own kind). One record a case
        # and kind.
        todo = sorted((x for x in rows if rank_of(x[8]) != 0), key=lambda x: (elements(x[6]["case"]), not x[4]))
        first = {}
        for x in todo:
            first.setdefault((x[6]["id"], x[4]), x[6])
        n, pairs = len(first), {(x[0], x[1]) for x in todo}
        for r in first.values():
            f.write(json.dumps(r) + "\n")
        # The passing records of those ops and dtypes, as much of each as the pairing reads (not
        # a case memcheck failed: its failing record is the one to confirm).
        failed_mc = {i for i, mc in first if mc}
        for r in native.values():
            if r["verdict"] == "pass" and (r["case"]["op"], r["case"]["dtype"]) in pairs and r["id"] not in failed_mc:
                f.write(json.dumps({k: r[k] for k in ("id", "case", "verdict", "detector") if k in r}) + "\n")
    print(f"\n({n} failing cases not yet shown upstream on both sides, and the passing records: {a.not_shown})")
