#!/usr/bin/env python3
"""Bit-identity of impls on the same case: group results.jsonl rows by (op, dtype, ne, params
except the ones named with --ignore) and compare each impl's `observed.output_digests`.
Usage: compare-digests.py RESULTS.jsonl [--ignore q_chunk,...]   Exit 1 if any group differs."""
import json
import sys

path = sys.argv[1]
ignore = set()
if "--ignore" in sys.argv:
    ignore = set(sys.argv[sys.argv.index("--ignore") + 1].split(","))
groups = {}
for line in open(path):
    r = json.loads(line)
    c = r["case"]
    params = {k: v for k, v in c.get("params", {}).items() if k not in ignore}
    key = (c["op"], c["dtype"], tuple(c["ne"]), json.dumps(params, sort_keys=True))
    d = r.get("observed", {}).get("output_digests")
    groups.setdefault(key, []).append((c["impl"], r["verdict"], d))
bad = 0
for key, rows in groups.items():
    digests = {d[2][0] if isinstance(d[2], list) and d[2] else None for d in rows}
    ok = len(rows) > 1 and len(digests) == 1 and None not in digests
    bad += not ok
    print(("SAME  " if ok else "DIFFER") + f" {key[0]} {key[1]} ne={list(key[2])} {key[3]}")
    for imp, verdict, d in rows:
        print(f"    {imp:18} {verdict:10} {d}")
sys.exit(1 if bad else 0)
