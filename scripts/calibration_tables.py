#!/usr/bin/env python3
"""Prints the calibration-sweep tables of docs/proof.md from scripts/calibration-sweep.sh's JSON.

Usage: python3 scripts/calibration_tables.py proof-results/calibration-*.json

For each workload (long-context and sharegpt-like at 70% load; the Mooncake trace's first half,
replayed open loop): one row per grid point (the engine model's idle-instance TTFT of an 8,000-token
prompt, uncached / cached, as the run's settings record it) with TTFT P50 and P90 per strategy and
the change of prefix-aware and cache-aware against random and against least-outstanding-requests
(same seed, same grid point); then the range of each change over the grid beside its value at the
reference calibration (280 / 63 ms). Every figure comes from the files; nothing is typed in.
"""
import json
import sys
from collections import defaultdict

REFERENCE = (280, 63)
BASELINES = ("random", "least-outstanding-requests")
OURS = ("prefix-aware", "cache-aware")


def change(x, base):
    return 100 * (x / base - 1)


def fmt(x):
    return f"{x:+.1f}%"


def setup(points):
    """The fleet and load of a workload's runs, from their settings: "7 instances, 70% load", or
    for a timed trace (the Mooncake replay) its speed and span."""
    runs = [r for seeds in points.values() for runs in seeds.values() for r in runs.values()]
    r = runs[0]
    s = r["settings"]
    if "load_pct" in s:
        return f"{r['instances']} instances, {s['load_pct']:g}% load"
    if "trace_speed" in s:
        speed = s["trace_speed"]
        span = s.get("duration_s", 0) * speed
        return f"{r['instances']} instances, trace replayed at {speed:g}x, its first {span:,.0f} s"
    if r["workload"] == "mooncake":
        return f"{r['instances']} instances, trace replayed open loop, {s.get('duration_s', 0):,.0f} s"
    return f"{r['instances']} instances"


def main(paths):
    # workload -> (uncached, cached) -> seed -> strategy -> run
    grid = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    overlapped = set()  # (workload, point) fitted with the all-reduces overlapped
    for path in paths:
        # calibration-sweep.sh keeps simulate's stderr beside the JSON: its calibration line says
        # when the fit had to overlap the all-reduces with the GEMMs (profiles.h, Calibrate).
        err = path[:-len(".json")] + ".err" if path.endswith(".json") else None
        overlap = False
        if err:
            try:
                with open(err) as f:
                    overlap = "overlapped" in f.read()
            except OSError:
                pass
        with open(path) as f:
            for r in json.load(f):
                s = r["settings"]
                point = (round(s["engine_uncached_ttft_ms"]), round(s["engine_cached_ttft_ms"]))
                strategy = r["strategy"].split("@")[0]
                grid[r["workload"]][point][r["seed"]][strategy] = r
                if overlap:
                    overlapped.add((r["workload"], point))
    for workload, points in sorted(grid.items()):
        print(f"\n#### Calibration sweep, {workload} (simulate, {setup(points)})\n")
        strategies = [s for s in BASELINES + OURS
                      if any(s in runs for seeds in points.values() for runs in seeds.values())]
        header = " | ".join(f"{s} P50 / P90" for s in strategies)
        gains = [(o, b) for o in OURS for b in BASELINES if o in strategies and b in strategies]
        gain_header = " | ".join(f"{o} vs {b} P50 / P90" for o, b in gains)
        print(f"| uncached / cached | seed | MFU | {header} | {gain_header} |")
        print("|---" * (3 + len(strategies) + len(gains)) + "|")
        changes = defaultdict(list)  # (ours, base, quantile) -> [(point, value)]
        for point in sorted(points):
            for seed, runs in sorted(points[point].items()):
                any_run = next(iter(runs.values()))
                cells = []
                for s in strategies:
                    r = runs.get(s)
                    cells.append(f"{r['ttft_p50_s']:.3f} / {r['ttft_p90_s']:.3f} s" if r else "-")
                gain_cells = []
                for o, b in gains:
                    ro, rb = runs.get(o), runs.get(b)
                    if not ro or not rb:
                        gain_cells.append("-")
                        continue
                    p50 = change(ro["ttft_p50_s"], rb["ttft_p50_s"])
                    p90 = change(ro["ttft_p90_s"], rb["ttft_p90_s"])
                    changes[(o, b, "P50")].append((point, p50))
                    changes[(o, b, "P90")].append((point, p90))
                    gain_cells.append(f"{fmt(p50)} / {fmt(p90)}")
                mfu = any_run["settings"].get("engine_mfu", float("nan"))
                note = " (all-reduces overlapped)" if (workload, point) in overlapped else ""
                print(f"| {point[0]} / {point[1]} ms | {seed} | {mfu:.3f}{note} | " + " | ".join(cells) +
                      " | " + " | ".join(gain_cells) + " |")
        print(f"\n#### Range over the grid, {workload}\n")
        print("| change | at 280 / 63 ms | range over the grid | grid points |")
        print("|---|---|---|---|")
        for (o, b, q), values in changes.items():
            ref = [v for p, v in values if p == REFERENCE]
            ref_s = ", ".join(fmt(v) for v in ref) if ref else "-"
            vs = [v for _, v in values]
            print(f"| {o} vs {b}, TTFT {q} | {ref_s} | {fmt(min(vs))} to {fmt(max(vs))} | {len(vs)} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
