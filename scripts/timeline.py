#!/usr/bin/env python3
"""A sweep's JSON events (`kedge sweep --format json`) on a timeline.

    kedge sweep ... --format json | scripts/timeline.py slim > run.timeline.jsonl
    scripts/timeline.py show run.timeline.jsonl [--slots N]

`slim` keeps every event's time (`t_s`) and name, and of each verdict only what a timeline
needs (op, dtype, shape, verdict, ms), so a whole sweep's stream fits in a report.
`show` prints where the wall went: the command's phases, and each run of cases (a tier, the
cases run again alone) with its start and end, its verdicts per tenth of it and the longest
gaps between verdicts (a tail where few slots were busy), and the slot-seconds its cases' own
times leave (`--slots N`: the first tier's slots, which has no tier line).
"""
import json
import signal
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
    if all(e.get("t_s") is None for e in events):
        print("no event has a time (t_s): a kedge from before events carried it")
        return
    # Each executor run (run-started .. run-ended) is a span; a tier or alone-again event
    # just before it names it, and a tier-ended event after it adds its figures.
    spans = []
    cur = None
    label, per = None, None
    for e in events:
        t = e.get("t_s") or 0.0
        k = e.get("event")
        if k == "tier":
            label = f"tier of {e.get('cases')} cases, {e.get('per_gpu')} at a time"
            per = e.get("per_gpu")
        elif k == "alone-again":
            label, per = f"alone again, {e.get('cases')} cases", 1
        elif k == "run-started":
            cur = {
                "label": label or f"run {e.get('under')}, {e.get('cases')} cases",
                "per": per or slots,
                "start": t,
                "end": t,
                "times": [],
                "ms": [],
            }
            label, per = None, None
        elif k == "case-finished" and cur is not None:
            cur["times"].append(t)
            cur["ms"].append(e.get("ms") or 0.0)
        elif k == "run-ended" and cur is not None:
            cur["end"] = t
            spans.append(cur)
            cur = None
        elif k == "tier-ended" and spans:
            spans[-1]["note"] = (
                f"tier wall {e.get('wall_s', 0):.1f} s, {e.get('replaced', 0)} workers replaced, "
                f"{e.get('waited_s', 0):.1f} s waited for them"
            )
        elif k == "phase":
            print(f"phase {e.get('name')}: {e.get('seconds', 0):.1f} s (ends at {t:.1f} s)")
    print(f"events: {len(events)}, last at {events[-1].get('t_s') or 0:.1f} s")
    for s in spans:
        n = len(s["times"])
        wall = s["end"] - s["start"]
        case_s = sum(s["ms"]) / 1000.0
        line = (
            f"{s['label']}: {s['start']:.1f} .. {s['end']:.1f} s ({wall:.1f} s), {n} verdicts, "
            f"case time {case_s:.1f} s"
        )
        if s["per"] and wall > 0:
            line += f", {s['per'] * wall - case_s:.1f} of {s['per'] * wall:.1f} slot-s outside it"
        print(line)
        if s.get("note"):
            print(f"    {s['note']}")
        if n < 10 or wall <= 0:
            continue
        # Verdicts per tenth of the span: where the pace falls off.
        step = wall / 10.0
        counts = [0] * 10
        for t in s["times"]:
            counts[min(int((t - s["start"]) / step), 9)] += 1
        print(f"    verdicts per {step:.1f} s: {counts}")
        times = s["times"]
        gaps = sorted(
            ((b - a, a) for a, b in zip([s["start"]] + times, times + [s["end"]])),
            reverse=True,
        )[:5]
        print("    longest gaps: " + ", ".join(f"{g:.1f} s at {a:.1f}" for g, a in gaps))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "slim":
        slim(sys.stdin, sys.stdout)
    elif len(sys.argv) >= 3 and sys.argv[1] == "show":
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        slots = None
        if "--slots" in sys.argv:
            slots = int(sys.argv[sys.argv.index("--slots") + 1])
        show(sys.argv[2], slots)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
