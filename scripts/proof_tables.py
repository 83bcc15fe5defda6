#!/usr/bin/env python3
"""Prints the markdown tables of docs/proof.md from the results scripts/proof.sh wrote.

Usage: python3 scripts/proof_tables.py [proof-results]

Every figure comes from the JSON files (docs/results-format.md); nothing is typed in. Each
acceptance criterion of issue 5 is checked per seed and printed as met / NOT met.
"""
import json
import os
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "proof-results"


def load(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def pct(x):
    return f"{100 * x:.1f}%"


def change(x, base):
    return f"{100 * (x / base - 1):+.1f}%" if base > 0 else "n/a"


def ok(cond):
    return "met" if cond else "NOT met"


def comparison(runs, title, ours="prefix-aware"):
    """One row per (seed, strategy) with changes against the same seed's random run."""
    if not runs:
        return
    print(f"\n#### {title}\n")
    print("| seed | strategy | TTFT P50 | P90 | P99 | hit rate | LRU bound | throughput | share min-max | overflow | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    base = {r["seed"]: r for r in runs if r["strategy"] == "random"}
    for r in sorted(runs, key=lambda r: (r["seed"], r["strategy"] != "random", r["strategy"])):
        b = base.get(r["seed"])
        p50 = f"{r['ttft_p50_s']:.3f} s" + (f" ({change(r['ttft_p50_s'], b['ttft_p50_s'])})" if b and b is not r else "")
        p90 = f"{r['ttft_p90_s']:.3f} s" + (f" ({change(r['ttft_p90_s'], b['ttft_p90_s'])})" if b and b is not r else "")
        lru = r.get("extra", {}).get("lru_bound_hit_rate")
        print(f"| {r['seed']} | {r['strategy']} | {p50} | {p90} | {r['ttft_p99_s']:.3f} s | {pct(r['hit_rate'])} | "
              f"{pct(lru) if lru is not None else '-'} | {r['throughput_rps']:.2f} rps | "
              f"{pct(min(r['share']))}-{pct(max(r['share']))} | {pct(r['overflow_rate'])} | {r['errors']} |")


def long_context_checks(runs, source, ours="prefix-aware"):
    by_seed = {}
    for r in runs:
        by_seed.setdefault(r["seed"], {})[r["strategy"]] = r
    print(f"\n#### Acceptance, long-context ({source})\n")
    print("| seed | P50 vs random (>= 70% lower) | hit rate (>= 80%) | random hit rate (20-30%) | shares (13.3-15.4%) | P90 vs random (goal >= 50% lower) | hit rate vs LRU bound (goal within 5 points) | next-preferred P90 <= least-loaded P90, same balance factor (goal) |")
    print("|---|---|---|---|---|---|---|---|")
    for seed, s in sorted(by_seed.items()):
        if "random" not in s or ours not in s:
            continue
        rnd, pa = s["random"], s[ours]
        p50 = 1 - pa["ttft_p50_s"] / rnd["ttft_p50_s"]
        p90 = 1 - pa["ttft_p90_s"] / rnd["ttft_p90_s"]
        shares_ok = min(pa["share"]) >= 0.133 and max(pa["share"]) <= 0.154
        lru = pa.get("extra", {}).get("lru_bound_hit_rate")
        ll = s.get("prefix-aware-least-loaded")  # the same balance factor, the other spill mode
        cells = [
            f"{pct(p50)}: {ok(p50 >= 0.70)}",
            f"{pct(pa['hit_rate'])}: {ok(pa['hit_rate'] >= 0.80)}",
            f"{pct(rnd['hit_rate'])}: {ok(0.20 <= rnd['hit_rate'] <= 0.30)}",
            f"{pct(min(pa['share']))}-{pct(max(pa['share']))}: {ok(shares_ok)}",
            f"{pct(p90)}: {ok(p90 >= 0.50)}",
            (f"{100 * (lru - pa['hit_rate']):.1f} points: {ok(lru - pa['hit_rate'] <= 0.05)}" if lru is not None else "-"),
            (f"{pa['ttft_p90_s']:.3f} vs {ll['ttft_p90_s']:.3f} s ({ll['strategy']}): {ok(pa['ttft_p90_s'] <= ll['ttft_p90_s'])}" if ll else "-"),
        ]
        print(f"| {seed} | " + " | ".join(cells) + " |")


def sharegpt_checks(runs, source, ours="prefix-aware"):
    by_seed = {}
    for r in runs:
        by_seed.setdefault(r["seed"], {})[r["strategy"]] = r
    print(f"\n#### Acceptance, sharegpt-like ({source})\n")
    print("| seed | P50 vs random (>= 10% lower) | P90 vs random (not worse) | hit rate, random -> prefix-aware |")
    print("|---|---|---|---|")
    for seed, s in sorted(by_seed.items()):
        if "random" not in s or ours not in s:
            continue
        rnd, pa = s["random"], s[ours]
        p50 = 1 - pa["ttft_p50_s"] / rnd["ttft_p50_s"]
        p90 = 1 - pa["ttft_p90_s"] / rnd["ttft_p90_s"]
        print(f"| {seed} | {pct(p50)}: {ok(p50 >= 0.10)} | {pct(p90)}: {ok(pa['ttft_p90_s'] <= rnd['ttft_p90_s'])} | "
              f"{pct(rnd['hit_rate'])} -> {pct(pa['hit_rate'])} |")


def demo_runs():
    runs = []
    for seed in (1, 2, 3):
        runs += load(f"demo-seed{seed}/results.json")
    return runs


sim_lc = load("sim-long-context.json")
sim_sg = load("sim-sharegpt-like.json")
comparison(sim_lc, "simulate, long-context, 1 hour, 70% load")
long_context_checks(sim_lc, "simulate")
comparison(sim_sg, "simulate, sharegpt-like, 1 hour, 70% load")
sharegpt_checks(sim_sg, "simulate")

demo = demo_runs()
live = [r for r in demo if r["source"] == "demo"]
twin = [r for r in demo if r["source"] == "simulate" and not r.get("settings", {}).get("sweep")]
lc_live = [r for r in live if r["workload"] == "long-context"]
sg_live = [r for r in live if r["workload"] == "sharegpt-like"]
if lc_live:
    comparison(lc_live, "demo (live through the gateway; client-measured TTFT), long-context")
    long_context_checks(lc_live, "demo, client-measured TTFT")
    engine = [dict(r, ttft_p50_s=r["engine_ttft_p50_s"], ttft_p90_s=r["engine_ttft_p90_s"]) for r in lc_live]
    long_context_checks(engine, "demo, engine-modelled TTFT")
    comparison([r for r in twin if r["workload"] == "long-context"], "demo's simulated twins, long-context")
if sg_live:
    comparison(sg_live, "demo (live), sharegpt-like")
    sharegpt_checks(sg_live, "demo, client-measured TTFT")
    engine = [dict(r, ttft_p50_s=r["engine_ttft_p50_s"], ttft_p90_s=r["engine_ttft_p90_s"]) for r in sg_live]
    sharegpt_checks(engine, "demo, engine-modelled TTFT")
    comparison([r for r in twin if r["workload"] == "sharegpt-like"], "demo's simulated twins, sharegpt-like")

for name, title in [("sweep-prefix.json", "prefix-length sweep (long-context, 20 req/s)"),
                    ("sweep-load.json", "load sweep (long-context)"),
                    ("scale.json", "scale events: add@1200, remove:instance-3@2000, replace:instance-5@2800"),
                    ("closed.json", "closed loop, 56 users (long-context)")]:
    runs = load(name)
    if not runs:
        continue
    print(f"\n#### {title}\n")
    print("| strategy | settings | TTFT P50 | P90 | hit rate | throughput | share min-max | overflow |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        keys = ("prefix_length", "load_pct", "concurrency_threshold", "concurrency")
        settings = ", ".join(f"{k}={r['settings'][k]:g}" for k in keys if k in r["settings"])
        print(f"| {r['strategy']} | {settings} | {r['ttft_p50_s']:.3f} s | {r['ttft_p90_s']:.3f} s | {pct(r['hit_rate'])} | "
              f"{r['throughput_rps']:.2f} rps | {pct(min(r['share']))}-{pct(max(r['share']))} | {pct(r['overflow_rate'])} |")

# Around each scale event: hit rate and TTFT P50 per window, to show what cold starts and lost
# caches cost and how fast they heal.
scale = load("scale.json")
if scale:
    events = [(1200, "add instance-8"), (2000, "remove instance-3"), (2800, "replace instance-5")]
    print("\n#### Hit rate and TTFT P50 per 60 s window around the scale events\n")
    print("| window start | " + " | ".join(f"{r['strategy']} hit rate | {r['strategy']} TTFT P50" for r in scale) + " |")
    print("|---|" + "---|---|" * len(scale))
    for at, what in events:
        starts = [at - 120, at - 60, at, at + 60, at + 120, at + 240]
        for t in starts:
            cells = []
            for r in scale:
                w = r["series"][1]["t_s"] - r["series"][0]["t_s"] if len(r["series"]) > 1 else 60
                p = next((p for p in r["series"] if p["t_s"] <= t < p["t_s"] + w), None)
                cells += [pct(p["hit_rate"]), f"{p['ttft_p50_s']:.3f} s"] if p else ["-", "-"]
            label = f"window holding {t:.0f} s" + (f" ({what})" if t == at else "")
            print(f"| {label} | " + " | ".join(cells) + " |")

# Key normalisation (issue 9) on noisy-native: the same prefix-aware routing keyed on raw bytes,
# on the canonical JSON, and on the canonical JSON without the per-request fields.
variants = [("norm-random.json", "random routing, for reference"),
            ("norm-raw.json", "prefix-aware, raw bytes (the managed service's key)"),
            ("norm-canonical.json", "prefix-aware, canonical JSON only"),
            ("norm-excluded.json", "prefix-aware, canonical JSON without id, created, metadata.trace_id")]
norm = [(label, load(name)) for name, label in variants]
if any(runs for _, runs in norm):
    print("\n#### Key normalisation, noisy-native (simulate, 600 s at 16.5 requests/s)\n")
    print("| key | seed | TTFT P50 | P90 | hit rate | share min-max |")
    print("|---|---|---|---|---|---|")
    for label, runs in norm:
        for r in sorted(runs, key=lambda r: r["seed"]):
            print(f"| {label} | {r['seed']} | {r['ttft_p50_s']:.3f} s | {r['ttft_p90_s']:.3f} s | "
                  f"{pct(r['hit_rate'])} | {pct(min(r['share']))}-{pct(max(r['share']))} |")
