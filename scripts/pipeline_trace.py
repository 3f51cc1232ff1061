#!/usr/bin/python3
"""Where a pipelined step's time goes, from the trace `causeway bench pipeline --trace` writes.

For every step (run) of the traced repeat, relative to the step's first launch:
  - per host (stage): when it prepared its first launch and when its device started it;
  - per device: the forward and backward phases' time per launch beyond the stage's
    `delay` (the span of the phase ÷ launches − the delay: waiting included), and how much
    longer each launch's run lasted than its `delay` (mean);
and over every launch of the repeat, the median and 90th percentile of that run overshoot
and of the gap between one launch's end and the next's start on the same device.

    causeway bench pipeline --stages 16 --forward-us 100 --activation-kb 0 \\
        --device-threads 2 --steps 3 --repeats 1 --trace trace.json --json
    /usr/bin/python3 scripts/pipeline_trace.py trace.json --forward-us 100

The figures of docs/BENCHMARKS.md, "The 16-stage pipeline of 100 us stages", come from it.
"""
import argparse
import collections
import json
import statistics


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--forward-us", type=float, required=True)
    ap.add_argument("--backward-us", type=float, default=-1, help="-1: 2 x forward")
    a = ap.parse_args()
    backward = a.backward_us if a.backward_us >= 0 else 2 * a.forward_us
    events = json.load(open(a.trace))["traceEvents"]
    runs = [e for e in events if e.get("ph") == "X" and e.get("cat") == "run"]
    prepared = [e for e in events if e.get("cat") == "prepared"]
    if not runs:
        raise SystemExit("no launches in the trace (was it written with --trace?)")

    def delay(e):
        return a.forward_us if "forward" in e["name"] else backward

    overshoot, gaps = [], []
    for step in sorted({e["args"]["run"] for e in runs}):
        mine = [e for e in runs if e["args"]["run"] == step]
        t0 = min(e["ts"] for e in mine)
        first_prepared = collections.defaultdict(lambda: float("inf"))
        for e in prepared:
            if e.get("args", {}).get("run") == step:
                first_prepared[e["pid"]] = min(first_prepared[e["pid"]], e["ts"] - t0)
        by_device = collections.defaultdict(list)
        for e in mine:
            by_device[(e["pid"], e.get("tid"))].append(e)
        print(f"step {step}: {(max(e['ts'] + e['dur'] for e in mine) - t0) / 1e3:.1f} ms")
        for (host, tid), launches in sorted(by_device.items()):
            launches.sort(key=lambda e: e["ts"])
            line = [f"  host {host}: prepared {first_prepared[host]:.0f} us,"
                    f" first launch {launches[0]['ts'] - t0:.0f} us"]
            for phase in ("forward", "backward"):
                ph = [e for e in launches if phase in e["name"]]
                if not ph:
                    continue
                span = ph[-1]["ts"] + ph[-1]["dur"] - ph[0]["ts"]
                line.append(f"{phase}: {span / len(ph) - delay(ph[0]):.1f} us per launch beyond"
                            f" the delay, runs {statistics.mean(e['dur'] - delay(e) for e in ph):.1f}"
                            " us over it")
            print("; ".join(line))
            overshoot += [e["dur"] - delay(e) for e in launches]
            gaps += [launches[i + 1]["ts"] - launches[i]["ts"] - launches[i]["dur"]
                     for i in range(len(launches) - 1)]
    print(f"all launches: run beyond its delay median {statistics.median(overshoot):.1f} us,"
          f" p90 {percentile(overshoot, 0.9):.1f} us; gap between launches median"
          f" {statistics.median(gaps):.1f} us, p90 {percentile(gaps, 0.9):.1f} us")


if __name__ == "__main__":
    main()
