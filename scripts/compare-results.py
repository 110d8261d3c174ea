#!/usr/bin/env python3
"""Two runs of the same suite, case by case: the same verdict, detector and output digests?

    scripts/compare-results.py BEFORE/results.jsonl AFTER/results.jsonl [--ignore-only]

Rows are matched by case id and the way they ran (`under`). For each case both runs have, the
verdict, the detector and `observed.output_digests` (the bytes of every output, as downloaded)
must be equal; each difference is printed with both sides. Cases only one run has are counted
and the first few named (a suite that grew between the two builds has some); with
--ignore-only they do not fail the comparison.

Why: a refactor of the engine must not change what kedge finds. Verdicts and detectors alone
would miss a change in what ran; the output digests say the kernels computed the same bytes.

Exit status: 0 every shared case is identical (and, without --ignore-only, no case is on one
side only); 1 otherwise; 2 usage or an unreadable file.
"""
import json
import sys


def load(path):
    rows = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    print(f"{path}:{n}: not a results line ({e})", file=sys.stderr)
                    sys.exit(2)
                key = (r.get("id") or json.dumps(r["case"], sort_keys=True), r.get("under", "native"))
                rows[key] = r
    except OSError as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
        sys.exit(2)
    return rows


def what(r):
    return (r.get("verdict"), r.get("detector"), tuple(r.get("observed", {}).get("output_digests") or ()))


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    ignore_only = "--ignore-only" in argv
    before, after = load(args[0]), load(args[1])
    shared = sorted(set(before) & set(after))
    only_b = sorted(set(before) - set(after))
    only_a = sorted(set(after) - set(before))
    differ = [k for k in shared if what(before[k]) != what(after[k])]
    digests = sum(1 for k in shared if what(after[k])[2])
    print(f"before: {len(before)} results ({args[0]})")
    print(f"after:  {len(after)} results ({args[1]})")
    print(f"shared: {len(shared)} cases, {digests} of them with output digests; "
          f"identical: {len(shared) - len(differ)}; different: {len(differ)}")
    for k in differ:
        b, a = before[k], after[k]
        print(f"DIFFER {k[1]} {a.get('case', {}).get('op')} {k[0]}")
        print(f"    before: {what(b)[0]} ({what(b)[1]}) {list(what(b)[2])}")
        print(f"    after:  {what(a)[0]} ({what(a)[1]}) {list(what(a)[2])}")
    for name, only in (("before", only_b), ("after", only_a)):
        if only:
            print(f"only {name}: {len(only)} cases, e.g. " + ", ".join(f"{u}:{i}" for i, u in only[:3]))
    bad = bool(differ) or (not ignore_only and (only_b or only_a))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
