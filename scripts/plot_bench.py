#!/usr/bin/python3
"""Turns the JSON lines of `causeway bench ... --json` into PNG plots.

    plot_bench.py RESULTS.jsonl OUTDIR

Writes dispatch.png (computations/s per mode and controller), scaling.png
(chained computations/s against devices), utilization.png (compute fraction,
and busy time including collective waits, against computation length),
pipeline.png, and from `causeway sim dispatch --json` sim_fig5.png
(computations/s of O/C/F, single and multi controller, against hosts) and
sim_fig6.png (smallest computation at which the single controller reaches
the target share of the multi-controller's throughput, against devices),
for whichever of those the results contain. Uses Debian's matplotlib (call it with /usr/bin/python3).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def plot_dispatch(rows, outdir):
    rows = [r for r in rows if r.get("bench") == "dispatch" and r["devices"] == 8
            and r.get("scheduling", "share") == "share"]
    # The mode comparison is the repeated runs; single runs belong to the
    # device-scaling plot.
    if any(r.get("repeat", 1) > 1 for r in rows):
        rows = [r for r in rows if r.get("repeat", 1) > 1]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    labels, values, colors = [], [], []
    def where(r):
        return "grpc" if r.get("cluster", "local") != "local" else "local"
    for r in sorted(rows, key=lambda r: (where(r), r["hosts"], r["mode"], r["controller"])):
        labels.append(f'{r["mode"]}\n{r["controller"]}\n{r["hosts"]}h\n{where(r)}')
        values.append(r["computations_per_second"])
        colors.append("tab:blue" if r["controller"] == "single" else "tab:gray")
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, fontsize=7)
    ax.set_ylabel("computations / s")
    if max(values) > 10 * min(values):
        ax.set_yscale("log")  # embedded and distributed differ by an order of magnitude
    ax.set_title("Dispatch, 8 devices (blue: single controller, grey: multi)")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "dispatch.png"), dpi=120)


def plot_scaling(rows, outdir):
    rows = [r for r in rows if r.get("bench") == "dispatch" and r["mode"] == "chained"
            and r["hosts"] == 1 and r.get("cluster", "local") == "local" and r.get("repeat", 1) == 1]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for controller in ("single", "multi"):
        pts = sorted((r["devices"], r["computations_per_second"]) for r in rows
                     if r["controller"] == controller)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=controller)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("devices")
    ax.set_ylabel("computations / s")
    ax.set_title("Chained dispatch against devices")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "scaling.png"), dpi=120)


def plot_utilization(rows, outdir):
    """Compute fraction (requested computation time / wall time, every
    device busy with it) against computation length; busy time, which
    includes time parked in collectives, dashed for comparison."""
    rows = [r for r in rows if r.get("bench") == "utilization"]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        us = [p["compute_us"] for p in r["rows"]]
        line, = ax.plot(us, [100 * p["compute_fraction"] for p in r["rows"]], marker="o",
                        label=f'{r["controller"]}: compute fraction')
        busy = [100 * p.get("busy_fraction_including_collective_waits", p.get("utilization", 0))
                for p in r["rows"]]
        ax.plot(us, busy, linestyle="--", color=line.get_color(), linewidth=1,
                label=f'{r["controller"]}: busy, incl. collective waits')
    ax.set_xscale("log")
    ax.set_xlabel("computation length (us)")
    ax.set_ylabel("% of devices x wall time")
    ax.set_title(f'Compute fraction, {rows[0]["devices"]} devices / {rows[0]["hosts"]} hosts')
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "utilization.png"), dpi=120)


def plot_pipeline(rows, outdir):
    rows = [r for r in rows if r.get("bench") == "pipeline"]
    if not rows:
        return
    # The bubble sweep: one island, parallel dispatch, 1 + 2 ms passes.
    rows = [r for r in rows if r["islands"] == 1 and r["dispatch"] == "parallel"
            and r["forward_us"] == 1000]
    fig, ax = plt.subplots(figsize=(5, 4))
    for schedule in ("gpipe", "1f1b"):
        pts = sorted((r["stages"], 100 * r["bound_over_measured"]) for r in rows
                     if r["schedule"] == schedule)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=schedule)
    ax.set_xlabel("stages (micro-batches = 4 x stages)")
    ax.set_ylabel("% of the GPipe bound's throughput")
    ax.set_ylim(0, 105)
    ax.legend()
    ax.set_title("Pipeline step against (M + S - 1)(F + B)")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "pipeline.png"), dpi=120)


def plot_sim_fig5(rows, outdir):
    rows = [r for r in rows if r.get("sim") == "dispatch" and r["compute_us"] == 0]
    for cpu in sorted({r.get("cpu", "calibrated") for r in rows}):
        # One point per host count, mode and controller (the first run of it).
        seen, mine = set(), []
        for r in rows:
            key = (r["hosts"], r["mode"], r["controller"])
            if r.get("cpu", "calibrated") == cpu and key not in seen:
                seen.add(key)
                mine.append(r)
        plot_sim_fig5_one(mine, outdir)


def plot_sim_fig5_one(rows, outdir):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"opbyop": "tab:red", "chained": "tab:blue", "fused": "tab:green"}
    for (mode, controller) in sorted({(r["mode"], r["controller"]) for r in rows}):
        pts = sorted((r["hosts"], r["computations_per_second"]) for r in rows
                     if r["mode"] == mode and r["controller"] == controller)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                linestyle="-" if controller == "single" else "--", color=colors.get(mode),
                label=f"{mode}, {controller}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("hosts (4 devices each)")
    ax.set_ylabel("computations / s (simulated)")
    cpu = rows[0].get("cpu", "calibrated")
    ax.set_title(f"Dispatch throughput, simulated ({cpu} CPU costs)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, f"sim_fig5_{cpu}.png"), dpi=120)


def plot_sim_fig6(rows, outdir):
    # Sweeps over computation lengths only (a single length finds no parity point).
    rows = [r for r in rows if r.get("sim") == "dispatch_parity" and len(r["ratios"]) > 1]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in sorted({r["mode"] for r in rows}):
        pts = sorted((r["devices"], r["smallest_compute_us_at_target"]) for r in rows
                     if r["mode"] == mode and r["smallest_compute_us_at_target"] is not None)
        ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], marker="o", label=mode)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("devices (4 per host)")
    ax.set_ylabel("smallest computation at parity (ms)")
    ax.set_title(f"Single controller at {100 * rows[0]['target']:.0f}% of multi (simulated)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "sim_fig6.png"), dpi=120)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = load(sys.argv[1])
    os.makedirs(sys.argv[2], exist_ok=True)
    for plot in (plot_dispatch, plot_scaling, plot_utilization, plot_pipeline, plot_sim_fig5,
                 plot_sim_fig6):
        plot(rows, sys.argv[2])


if __name__ == "__main__":
    main()
