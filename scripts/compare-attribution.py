#!/usr/bin/env python3
"""Compare sanitizer attribution of two sweeps of the same cases: one with many cases per
sanitized worker (--batch 16), one with one case per worker (--batch 1). Every case must get
the same verdict, detector and findings. Usage: compare-attribution.py BATCHED.jsonl ALONE.jsonl"""
import json, sys

def load(p):
    out = {}
    for line in open(p):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        key = (r["id"], r["under"])
        out[key] = (r["verdict"], r["detector"], sorted((f["text"], f.get("kernel"), f["count"]) for f in r.get("findings", []) if f["verdict"] != "pass"))
    return out

a, b = load(sys.argv[1]), load(sys.argv[2])
if set(a) != set(b):
    print(f"different case sets: {len(a)} vs {len(b)}")
    sys.exit(1)
diff = [k for k in a if a[k] != b[k]]
found = sum(1 for k in a if a[k][2])
print(f"{len(a)} cases, {found} with sanitizer findings; batched vs alone: {len(diff)} differ")
for k in diff:
    print("  DIFF", k, a[k], b[k])
sys.exit(1 if diff else 0)
