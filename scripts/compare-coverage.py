#!/usr/bin/env python3
"""kedge's (op, dtype) coverage of a ggml build against upstream's own suite on it.

    scripts/compare-coverage.py UPSTREAM.csv KEDGE [BACKEND] [--all]

UPSTREAM.csv: `test-backend-ops support -b BACKEND --output csv` of the build (its whole suite,
each case supported or not). KEDGE: the plan of a kedge sweep of the same build
(`OUT/plan.jsonl`, or `kedge plan --json`), or the test-backend-ops lines kedge writes for every
case it derives (`cargo run -p kedge-ops --example upstream_lines`: constructor, op and vars a
line), which needs no device. An upstream pair is the op with each type its case names (type,
type_a, type_src/type_dst, type_K/type_V, type_idx, ...), counted where BACKEND supports the
case, or for every case with --all (what upstream tests, whatever one backend supports); kedge's
pair is its case's op (ggml's name) with its dtype and any type parameter (cpy's destination,
set_rows' index type), or from its lines the types their vars name, as upstream's. Prints both
counts, the pairs kedge covers that upstream does not run, and every upstream pair kedge lacks
(exit status 1 if any)."""
import csv, json, re, sys
from collections import defaultdict

args = [a for a in sys.argv[1:] if a != "--all"]
every_case = "--all" in sys.argv[1:]
up_csv, plan = args[0], args[1]
backend = args[2] if len(args) > 2 else None
TYPES = re.compile(r"(?:^|,)(type[A-Za-z_]*)=([a-z0-9_A-Z]+)")
TYPE_NAME = re.compile(r"^(f32|f16|bf16|i32|i16|i8|i64|q[0-9]_[0-9K]|q[0-9]_K|iq[0-9]_[a-z]+|mxfp4|nvfp4|tq[0-9]_0)$")


def types_of(vars_str):
    return set(t for _, t in TYPES.findall(vars_str) if TYPE_NAME.match(t))

# kedge op name -> ggml op name, from the plan's upstream lines when they are there; else the
# op name upper-cased (kedge's ggml-table ops are named as ggml's in lower case).
up = defaultdict(set)
up_ops_all = set()
for r in csv.DictReader(open(up_csv)):
    if backend and r["backend_name"] != backend:
        continue
    op = r["op_name"]
    up_ops_all.add(op)
    if not every_case and r["supported"] not in ("1", "yes", "true", "True"):
        continue
    for t in types_of(r["op_params"]):
        up[op].add(t)

NAMES = {"rms_norm": "RMS_NORM", "rms_norm_mul_add": "RMS_NORM_MUL_ADD", "norm": "NORM", "l2_norm": "L2_NORM",
         "softmax": "SOFT_MAX", "cumsum": "CUMSUM", "tri": "TRI", "add_id": "ADD_ID"}
kedge = defaultdict(set)
for line in open(plan):
    line = line.strip()
    if not line:
        continue
    if "\t" in line and not line.startswith("{"):
        # A test-backend-ops line kedge writes: constructor, op, vars.
        _, op, vars_str = line.split("\t")[:3]
        kedge[op] |= types_of(vars_str)
        continue
    v = json.loads(line)
    c = v.get("case", v)
    op = NAMES.get(c["op"], c["op"].upper())
    kedge[op].add(c["dtype"])
    for k, val in (c.get("params") or {}).items():
        if k in ("dst", "type_kv", "type_idx") and isinstance(val, str):
            kedge[op].add(val)

up_pairs = {(o, t) for o, ts in up.items() for t in ts}
k_pairs = {(o, t) for o, ts in kedge.items() for t in ts}
missing = sorted(up_pairs - k_pairs)
extra = sorted(k_pairs - up_pairs)
ops_missing = sorted(set(up) - set(kedge))
scope = "every case, supported or not" if every_case else f"supported on {backend or 'the backend'}"
print(f"upstream ({scope}): {len(up)} ops, {len(up_pairs)} (op, type) pairs")
print(f"kedge: {len(kedge)} ops, {len(k_pairs)} (op, type) pairs")
print(f"upstream ops kedge does not have ({len(ops_missing)}): {', '.join(ops_missing)}")
have = [p for p in missing if p[0] in kedge]
print(f"(op, type) pairs of ops kedge has that it does not run ({len(have)}):")
for o, t in have:
    print(f"  MISSING {o} {t}")
print(f"pairs kedge runs beyond upstream's ({len(extra)}): " + ", ".join(f"{o}/{t}" for o, t in extra))
sys.exit(1 if missing else 0)
