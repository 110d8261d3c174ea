"""The passing side of a failing case, as scripts/confirm-upstream.py and scripts/findings.py
pair them: the same op, impl, dtype and parameters with one dimension (or one integer
parameter) moved to the nearest value a run passed at."""
import json
from collections import defaultdict


def key(c, skip):
    """The case without dimension `skip` (an int) or parameter `skip` (a name)."""
    p = dict(c.get("params") or {})
    if isinstance(skip, str):
        p.pop(skip, None)
    ne = list(c["ne"])
    if isinstance(skip, int):
        ne[skip] = None
    return (c["op"], c["impl"], c["dtype"], json.dumps(ne), json.dumps(p, sort_keys=True))


def moves(c):
    """Each way a case can move: (kind, which, the case without it, its value)."""
    out = [("ne", d, key(c, d), c["ne"][d]) for d in range(4)]
    out += [("p", k, key(c, k), v) for k, v in (c.get("params") or {}).items()
            if isinstance(v, int) and not isinstance(v, bool)]
    return out


class Passing:
    """The passing records of a run, indexed by each way their cases can move."""

    def __init__(self, records):
        self.by = defaultdict(list)
        for r in records:
            if r["verdict"] == "pass":
                for kind, which, k, v in moves(r["case"]):
                    self.by[(kind, which, k)].append((v, r))

    def nearest(self, c):
        """The passing record nearest to case `c` along one move, or None (the first of
        equally near ones, in the records' order)."""
        best, other = None, None
        for kind, which, k, v in moves(c):
            for val, o in self.by[(kind, which, k)]:
                if val != v and (best is None or abs(val - v) < best):
                    best, other = abs(val - v), o
        return other
