#!/usr/bin/env python3
"""A sweep's JSON events (`kedge sweep --format json`) on a timeline.

    kedge sweep ... --format json | scripts/timeline.py slim > run.timeline.jsonl
    scripts/timeline.py show run.timeline.jsonl [--slots N]

`slim` keeps every event's time (`t_s`) and name, and of each verdict only what a timeline
needs (op, dtype, shape, verdict, ms), so a whole sweep's stream fits in a report.
`show` prints where the wall went: the run's phases and tiers with their start and end, and for
each run the verdicts per interval, the longest gaps between verdicts and the last verdicts'
times (a tail where few slots were busy). With `--slots N`, the slot-seconds the verdicts'
case times leave unused in each tier.
"""
import json
import sys


def slim(src, dst):
    for line in src:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        kind = e.get("event")
        if kind == "case-finished":
            r = e.get("result", {})
            c = r.get("case", {})
            out = {
                "t_s": e.get("t_s"),
                "event": kind,
                "op": c.get("op"),
                "impl": c.get("impl"),
                "dtype": c.get("dtype"),
                "ne": c.get("ne"),
                "verdict": r.get("verdict"),
                "ms": r.get("ms"),
            }
        elif kind == "summary":
            out = {k: v for k, v in e.items() if not isinstance(v, (list, dict))}
        else:
            out = {
                k: (v[:300] if isinstance(v, str) else v)
                for k, v in e.items()
                if k != "result"
            }
        dst.write(json.dumps(out) + "\n")


def show(path, slots):
    events = [json.loads(l) for l in open(path) if l.strip()]
    if not events:
        print("no events")
        return
    # Split into runs (run-started .. run-ended) and tiers within them.
    spans = []  # (label, start, end, verdict times, case ms)
    cur = None
    tier = None
    for e in events:
        t = e.get("t_s") or 0.0
        k = e.get("event")
        if k == "run-started":
            cur = {"label": f"run {e.get('under')}", "start": t, "end": t, "times": [], "ms": []}
            tier = dict(cur, label=f"  first tier ({e.get('cases')} cases)", times=[], ms=[])
        elif k == "tier" and cur is not None:
            if tier is not None and tier["times"]:
                tier["end"] = tier["times"][-1]
                spans.append(tier)
            tier = {
                "label": f"  tier {e.get('cases')} cases {e.get('per_gpu')} at a time",
                "start": t,
                "end": t,
                "times": [],
                "ms": [],
                "per_gpu": e.get("per_gpu"),
            }
        elif k == "alone-again" and cur is not None:
            if tier is not None and tier["times"]:
                tier["end"] = tier["times"][-1]
                spans.append(tier)
            tier = {
                "label": f"  alone again {e.get('cases')} cases",
                "start": t,
                "end": t,
                "times": [],
                "ms": [],
                "per_gpu": 1,
            }
        elif k == "tier-ended" and tier is not None:
            tier["end"] = t
            tier["note"] = (
                f"wall {e.get('wall_s', 0):.1f} s, replaced {e.get('replaced', 0)}, "
                f"waited {e.get('waited_s', 0):.1f} s"
            )
            spans.append(tier)
            tier = None
        elif k == "case-finished":
            for s in (cur, tier):
                if s is not None:
                    s["times"].append(t)
                    s["ms"].append(e.get("ms") or 0.0)
        elif k == "run-ended" and cur is not None:
            cur["end"] = t
            if tier is not None and tier["times"]:
                tier["end"] = tier["times"][-1]
                spans.append(tier)
            tier = None
            spans.append(cur)
            cur = None
        elif k == "phase":
            print(f"phase {e.get('name')}: {e.get('seconds', 0):.1f} s (ends at {t:.1f} s)")
    print(f"events: {len(events)}, last at {events[-1].get('t_s', 0):.1f} s")
    for s in spans:
        n = len(s["times"])
        wall = s["end"] - s["start"]
        line = f"{s['label']}: {s['start']:.1f} .. {s['end']:.1f} s ({wall:.1f} s), {n} verdicts"
        if s.get("note"):
            line += f"; {s['note']}"
        case_s = sum(s["ms"]) / 1000.0
        line += f"; case time {case_s:.1f} s"
        per = s.get("per_gpu") or slots
        if per and wall > 0:
            line += f", {per * wall - case_s:.1f} of {per * wall:.1f} slot-s outside case time"
        print(line)
        if not s["label"].startswith("run") or n == 0:
            continue
        times = s["times"]
        # Verdicts per tenth of the run: where the pace falls off.
        step = max(wall / 10.0, 1e-9)
        counts = [0] * 10
        for t in times:
            counts[min(int((t - s["start"]) / step), 9)] += 1
        print(f"    verdicts per {step:.1f} s: {counts}")
        gaps = sorted(
            ((b - a, a) for a, b in zip([s["start"]] + times, times + [s["end"]])),
            reverse=True,
        )[:5]
        print("    longest gaps: " + ", ".join(f"{g:.1f} s at {a:.1f}" for g, a in gaps))
        last = times[-min(10, n):]
        print("    last verdicts at: " + ", ".join(f"{t:.1f}" for t in last))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "slim":
        slim(sys.stdin, sys.stdout)
    elif len(sys.argv) >= 3 and sys.argv[1] == "show":
        slots = None
        if "--slots" in sys.argv:
            slots = int(sys.argv[sys.argv.index("--slots") + 1])
        show(sys.argv[2], slots)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
