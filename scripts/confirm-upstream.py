#!/usr/bin/env python3
"""Each failure of a kedge sweep of a ggml build, shown with upstream's own tools.

    scripts/confirm-upstream.py KEDGE GGML_DIR RESULTS.jsonl OUTDIR [--backend CUDA0] [--max N]
                                [--memcheck MEMCHECK-RESULTS.jsonl] [--jobs J] [--max-time S]
                                [--only OP[/DTYPE],...] [--per-op N] [--c-repro auto|always]

For every failing case of the sweep (at most N, each op's first ones) and the passing case on
the other side of its transition (the same case with one dimension or parameter one step
away, where the sweep ran it), `kedge repro` gives test-backend-ops' constructor line and the
command that runs just that case. The lines become the eval list of the build's own
test-backend-ops (its tests/test-backend-ops.cpp in the build's source, rebuilt in place:
`scripts/build-ggml.sh --cuda` keeps the CMake tree), which then runs each case on BACKEND
alone. Where the constructor cannot express the case's layout (padding, views), the C program
`kedge repro` writes is built and run instead, both sides. A failure memcheck found (detector
memcheck) is shown under memcheck, both sides: test-backend-ops and the C program each run
under `compute-sanitizer --tool memcheck --padding 512` (COMPUTE_SANITIZER names the tool). The
C program runs for every such case, since test-backend-ops puts a test's tensors in one buffer,
where a read past one tensor lands in the next and memcheck sees nothing; the C program gives
each tensor a buffer of its own, as kedge does. Writes OUTDIR/findings.md (one row
per case: op, dtype, shape, kedge's verdict and detector, whether memcheck alone saw it, what
upstream's run said) and OUTDIR/confirm.jsonl (the same, with the last lines of upstream's
output, and what `kedge repro` said where it wrote no line to run). The repros are written,
and the cases run, J at a time (default: half the cores, at most 8), each in a process of its
own: one that aborts or hangs costs only its own row. Runs also wait for host memory: at most
half of what the host has free is held by the cases running (estimated from each case's
shape), so big cases run fewer at a time and do not fail for each other. A line two rows share
(one passing side paired with several failures) runs once. Each row is appended to
confirm.jsonl as it finishes, so a run cut off keeps what it confirmed; with --max-time, no run
starts after S seconds and the rows left say so ("not run (--max-time ...)"). At the end
confirm.jsonl is written again, in row order."""
import argparse, collections, json, os, re, shlex, subprocess, sys, threading, time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from pairing import Passing

ap = argparse.ArgumentParser()
ap.add_argument("kedge")
ap.add_argument("ggml")
ap.add_argument("results")
ap.add_argument("out")
ap.add_argument("--backend", default="CUDA0")
ap.add_argument("--max", type=int, default=80)
ap.add_argument("--memcheck")
ap.add_argument("--timeout", type=int, default=120,
                help="seconds an upstream run may take, and as much again per 2^30 elements of its case")
ap.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
ap.add_argument("--max-time", type=float, help="start no run after this many seconds")
ap.add_argument("--only", help="OP or OP/DTYPE, comma separated: those failures only")
ap.add_argument("--per-op", type=int, help="each op's first N failures (default: max(2, N/20))")
ap.add_argument("--c-repro", choices=("auto", "always"), default="auto",
                help="auto: the C program where the line cannot express the case or memcheck found"
                     " it; always: on every row too (a defect test-backend-ops' NMSE bound is too"
                     " coarse to see at the case's size: one row of 2^26 never written)")
a = ap.parse_args()
STARTED = time.monotonic()


def out_of_time():
    return a.max_time is not None and time.monotonic() - STARTED > a.max_time
os.makedirs(a.out, exist_ok=True)

OK = ("pass", "skipped", "unsupported")
# Back-to-back allocations hide a short overrun from memcheck: --padding puts a gap after each.
SANITIZER = [os.environ.get("COMPUTE_SANITIZER", "compute-sanitizer"), "--tool", "memcheck",
             "--padding", "512", "--print-limit", "4"]


def tail(text, n):
    """The last n non-empty lines of a tool's output, each cut to 200 characters."""
    return [l.strip()[:200] for l in text.splitlines() if l.strip()][-n:]


class MemoryGate:
    """At most `cap` bytes of estimated host memory held by the runs at a time (one run is
    always let through, however big): upstream's test-backend-ops holds a case's tensors on the
    CPU backend and float copies of both outputs, so a few 2^30-element cases side by side can
    exhaust the host and fail (or be killed) for that reason alone."""

    def __init__(self, cap):
        self.cap, self.used, self.cv = cap, 0, threading.Condition()

    def hold(self, need):
        with self.cv:
            self.cv.wait_for(lambda: self.used == 0 or self.used + need <= self.cap)
            self.used += need
        return need

    def free(self, need):
        with self.cv:
            self.used -= need
            self.cv.notify_all()


def host_bytes():
    try:
        for l in open("/proc/meminfo"):
            if l.startswith("MemAvailable:"):
                return int(l.split()[1]) * 1024
    except OSError:
        pass
    return 16 << 30


WIDTH = {"f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i16": 2, "i64": 8}


def run_bytes(case):
    """A run's host memory, estimated: the case's largest tensor (the shape's elements at the
    dtype's width) three times over on the CPU backend, and two f32 copies of it to compare."""
    n = 1
    for d in case["ne"]:
        n *= max(1, int(d))
    return n * (3 * WIDTH.get(case["dtype"], 1) + 8)


GATE = MemoryGate(host_bytes() // 2)


def load(path):
    out = []
    if path and os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


results = [r for r in load(a.results) if r["case"]["impl"].startswith("ggml:")]
memcheck = {r["id"]: r for r in load(a.memcheck)}


# The other side of each failure: the same case with one dimension (or integer parameter)
# moved to the nearest value the sweep ran, that passed.
PASSING = Passing(results)

ONLY = {w.strip() for w in (a.only or "").split(",") if w.strip()}


def wanted(c):
    return not ONLY or c["op"] in ONLY or f'{c["op"]}/{c["dtype"]}' in ONLY


failing = [r for r in results if r["verdict"] not in OK and wanted(r["case"])]
per_op = defaultdict(int)
chosen = []
for r in failing:
    op = r["case"]["op"]
    if per_op[op] >= (a.per_op or max(2, a.max // 20)) or len(chosen) >= a.max:
        continue
    per_op[op] += 1
    chosen.append((r, PASSING.nearest(r["case"])))


def repro(case_line, out_dir=None):
    cmd = [a.kedge, "repro", case_line, "--ggml", a.ggml]
    if out_dir:
        cmd += ["--out", out_dir]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = p.stdout
    if p.returncode != 0:
        said = f"kedge repro rc={p.returncode}: " + " | ".join(tail(p.stderr, 3))
    else:
        said = " | ".join(tail(text, 2))
    ctor = next((l for l in text.splitlines() if l.startswith("test_cases.emplace_back(")), None)
    run = next((l for l in text.splitlines() if l.startswith("test-backend-ops test ")), None)
    layout = "does not reproduce the case's layout" in text
    cc = next((l for l in text.splitlines() if l.startswith("cc -std=c11")), None)
    return ctor, run, layout, cc, said


def row(side, x, r):
    line = json.dumps(x["case"], separators=(",", ":"))
    said = None
    try:
        ctor, run, layout, cc, said = repro(line)
    except Exception as e:  # a repro that cannot be written is said, not fatal
        ctor, run, layout, cc, said = None, None, False, None, f"kedge repro: {e}"
        print(f"repro failed for {line}: {e}", file=sys.stderr)
    out = {"side": side, "result": x, "ctor": ctor, "run": run, "layout": layout, "cc": cc,
           "pair": r["id"], "memcheck": r["detector"] == "memcheck"}
    if not (ctor or cc):
        # Why there is no line to run: what kedge repro said.
        out["repro_said"] = (said or "")[-400:]
    return out


sides = [(side, x, r) for r, other in chosen for side, x in (("fail", r), ("pass", other)) if x is not None]
with ThreadPoolExecutor(a.jobs) as pool:
    rows = list(pool.map(lambda t: row(*t), sides))

# The build's own test-backend-ops, with these lines as its eval cases.
cfg = os.path.join(a.ggml, ".build", "config")
src = open(cfg).read().splitlines()[0] if os.path.exists(cfg) else None
tbo = os.path.join(src, "tests", "test-backend-ops.cpp") if src else None
binp = None
if tbo and os.path.exists(tbo):
    pristine = tbo + ".pristine"
    if not os.path.exists(pristine):
        os.rename(tbo, pristine)
    text = open(pristine).read()
    patched, n = re.subn(
        r"(static std::vector<std::unique_ptr<test_case>> make_test_cases_eval\(\) \{\n)",
        r'\1    {\n        std::vector<std::unique_ptr<test_case>> test_cases;\n#include "kedge-cases.inc"\n        return test_cases;\n    }\n',
        text, count=1)
    ctors = sorted(set(x["ctor"] for x in rows if x["ctor"]))
    open(os.path.join(src, "tests", "kedge-cases.inc"), "w").write("\n".join(ctors) + "\n")
    open(tbo, "w").write(patched if n else text)
    tree = os.path.join(a.ggml, ".build", "cmake")
    if os.path.exists(os.path.join(tree, "CMakeCache.txt")):
        b = subprocess.run(["cmake", "--build", tree, "--target", "test-backend-ops", "-j",
                            str(os.cpu_count() or 4)], capture_output=True, text=True)
        cand = os.path.join(tree, "bin", "test-backend-ops")
    else:
        # A build carried without its CMake tree (its lib/ and include/ only): the one source
        # file compiled against them, as its CMake target would.
        cand = os.path.join(a.out, "test-backend-ops")
        lib = os.path.join(a.ggml, "lib")
        b = subprocess.run(["g++", "-O2", "-std=c++17", "-I", os.path.join(a.ggml, "include"), tbo,
                            "-o", cand, "-L", lib, "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}",
                            "-pthread"], capture_output=True, text=True)
    open(os.path.join(a.out, "tbo-build.log"), "w").write(b.stdout + b.stderr)
    if b.returncode == 0 and n and os.path.exists(cand):
        binp = cand
    print(f"test-backend-ops with {len(ctors)} kedge lines: build rc={b.returncode}, patched={n}")
else:
    print("no build source with tests/test-backend-ops.cpp: upstream runs skipped")


def sanitized(x, argv):
    """argv as the row runs it: under memcheck where memcheck found the pair's failure."""
    return SANITIZER + argv if x["memcheck"] else argv


def memcheck_errors(out):
    """What memcheck said: its error count and first record, or that it said nothing."""
    m = re.search(r"ERROR SUMMARY: (\d+) error", out)
    if not m:
        return "memcheck said nothing (did compute-sanitizer run?)"
    first = next((l.split("=========")[-1].strip() for l in out.splitlines() if "Invalid" in l), "")
    return f"memcheck: {m.group(1)} errors" + (f" ({first[:100]})" if first else "")


RAN = {}  # argv -> (what upstream said, its output's last lines): a line run once
RAN_LOCK = threading.Lock()


def run_upstream(x):
    """What upstream's run of the row's line said, and its output's last lines. A line two rows
    share (a passing side paired with several failures) runs once; the second row waits for it."""
    if not binp or not x["run"]:
        return "not run", []
    argv = shlex.split(x["run"])
    argv[0] = binp
    argv = sanitized(x, [a.backend if v == "CUDA0" else v for v in argv])
    with RAN_LOCK:
        slot = RAN.get(tuple(argv))
        mine = slot is None
        if mine:
            slot = RAN[tuple(argv)] = {"done": threading.Event()}
    if mine:
        need = GATE.hold(run_bytes(x["result"]["case"]))
        try:
            slot["said"] = run_upstream_once(x, argv)
        finally:
            GATE.free(need)
            slot["done"].set()
    slot["done"].wait()
    return slot["said"]


def timeout_of(result):
    """A run's time limit: --timeout, and as much again per 2^30 elements of the case: its
    shape's, or, where kedge's run recorded its tensors, four bytes of the largest (diag's
    output is ne0 times its input). test-backend-ops draws a case's inputs, computes it on the
    CPU backend and compares the two outputs value by value on one thread: at 2^31 f16
    elements a passing case ran past 120 s on the GPU machine's host."""
    n = 1
    for d in result["case"]["ne"]:
        n *= max(1, int(d))
    allocs = (result.get("observed") or {}).get("allocations") or []
    n = max([n] + [int(t.get("bytes", 0)) // 4 for t in allocs])
    return a.timeout * (1 + n / (1 << 30))


def run_upstream_once(x, argv):
    limit = timeout_of(x["result"])
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return f"timeout ({limit:.0f} s)", []
    except OSError as e:
        return f"not run ({e})", []
    out = p.stdout + p.stderr
    return upstream_said(x, p, out), tail(out, 4)


# test-backend-ops' words for a comparison that failed (its ERR, NMSE and MAA checks, a NaN or
# an infinity where the CPU backend has none, a sentinel after a tensor overwritten).
COMPARED = re.compile(r"\[[A-Z0-9_]+\] (?:ERR|NMSE|MAA) = \S+ > \S+|\[[A-Z0-9_]+\] NaN at index \d+"
                      r"|\[[A-Z0-9_]+\] inf (?:sign )?mismatch|sentinel mismatch: \S+|compare failed")


def upstream_said(x, p, out):
    if x["memcheck"]:
        m = re.search(r"(\d+)/(\d+) tests passed", out)
        if m and m.group(2) == "0":
            return "not run by upstream (the filter matched nothing)"
        return f"{'ran' if m else 'did not finish'} under memcheck, {memcheck_errors(out)}"
    err = next((l.strip() for l in out.splitlines() if "error" in l.lower() or "assert" in l.lower()), "")
    # A value that failed its comparison: test-backend-ops says which check on the case's line.
    why = COMPARED.search(out)
    if why and not err:
        err = why.group(0)
    m = re.search(r"(\d+)/(\d+) tests passed", out)
    if p.returncode == 0 and m and m.group(1) == m.group(2) and m.group(2) != "0":
        return "PASS"
    if m and m.group(2) == "0":
        return f"not run by upstream (rc={p.returncode}; the filter matched nothing)"
    return f"FAIL rc={p.returncode} {err[:160]}".strip()


def run_c(x, d):
    line = json.dumps(x["result"]["case"], separators=(",", ":"))
    try:
        _, _, _, cc, _ = repro(line, d)
    except Exception as e:
        return f"C repro: not written ({e})"
    if not cc:
        return "C repro: no build command"
    b = subprocess.run(cc, shell=True, cwd=d, capture_output=True, text=True)
    if b.returncode != 0:
        return f"C repro: build failed: {b.stderr.strip()[:160]}"
    need = GATE.hold(run_bytes(x["result"]["case"]))
    try:
        p = subprocess.run(sanitized(x, ["./repro", a.backend, "case"]), cwd=d, capture_output=True,
                           text=True, timeout=timeout_of(x["result"]))
    except subprocess.TimeoutExpired:
        return "C repro: timeout"
    except OSError as e:
        return f"C repro: not run ({e})"
    finally:
        GATE.free(need)
    said = next((l.strip() for l in p.stdout.splitlines() if l.strip() in ("PASS", "FAIL")
                 or l.startswith(("FAIL", "could not run"))), "")
    if x["memcheck"]:
        return f"C repro under memcheck rc={p.returncode} {said[:80]}; {memcheck_errors(p.stdout + p.stderr)}"
    last = (p.stdout.strip().splitlines() or [""])[-1]
    return f"C repro rc={p.returncode} {last[:120]}"


def record(x):
    """The row as confirm.jsonl holds it."""
    r = x["result"]
    mc = memcheck.get(r["id"])
    x["memcheck_only"] = bool(mc and r["verdict"] == "pass" and mc["verdict"] not in OK)
    return json.dumps({k: v for k, v in x.items() if k != "result"} | {"id": r["id"], "case": r["case"],
                      "verdict": r["verdict"], "detector": r["detector"]}) + "\n"


JSONL = os.path.join(a.out, "confirm.jsonl")
open(JSONL, "w").close()
JSONL_LOCK = threading.Lock()


def confirm(i, x):
    t0 = time.monotonic()
    if out_of_time():
        x["upstream"], x["upstream_tail"] = f"not run (--max-time {a.max_time:g} s)", []
    else:
        x["upstream"], x["upstream_tail"] = run_upstream(x)
        if (x["layout"] or x["memcheck"] or a.c_repro == "always") and not out_of_time():
            x["c_repro"] = run_c(x, os.path.join(a.out, f"c-{i}"))
    x["seconds"] = round(time.monotonic() - t0, 1)
    with JSONL_LOCK, open(JSONL, "a") as f:
        f.write(record(x))


t0 = time.monotonic()
with ThreadPoolExecutor(a.jobs) as pool:
    list(pool.map(lambda t: confirm(*t), enumerate(rows)))
wall = time.monotonic() - t0

with open(JSONL, "w") as f:
    for x in rows:
        f.write(record(x))

with open(os.path.join(a.out, "findings.md"), "w") as f:
    f.write(f"| op | dtype | ne | params | side | kedge verdict (detector) | upstream test-backend-ops on {a.backend} | C repro |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    for x in rows:
        c = x["result"]["case"]
        p = ",".join(f"{k}={v}" for k, v in (c.get("params") or {}).items())
        up = x["upstream"] + (f" ({x['repro_said'][:160]})" if x.get("repro_said") else "")
        f.write(f"| {c['op']} | {c['dtype']} | {c['ne']} | {p} | {x['side']} | {x['result']['verdict']} ({x['result']['detector']}) | {up} | {x.get('c_repro', '')} |\n")
# How each side came out upstream: what a reader of the first line needs before the rows.
said = collections.Counter(
    (x["side"], "FAIL" if x["upstream"].startswith("FAIL") else "PASS" if x["upstream"].startswith("PASS")
     else "not run" if x["upstream"].startswith("not run") else "other")
    for x in rows)
print(f"{len(failing)} failing cases; {len(chosen)} taken, with {sum(1 for x in rows if x['side'] == 'pass')} passing sides"
      f" ({len(rows)} rows, {len(RAN)} upstream runs, {a.jobs} at a time and at most {GATE.cap / 2**30:.0f} GiB of cases"
      f" on the host: {wall:.0f} s); upstream said: "
      + ", ".join(f"{side} side {k} {n}" for (side, k), n in sorted(said.items())))
for x in rows:
    c = x["result"]["case"]
    print(f"{x['side']:4} {c['op']} {c['dtype']} {c['ne']}: kedge {x['result']['verdict']} ({x['result']['detector']}); upstream: {x['upstream']}"
          + (f"; {x['c_repro']}" if x.get("c_repro") else ""))
