#!/usr/bin/env python3
"""Before/after tables for docs/proof.md: the same experiments on the engine model before issue 24
(proof-results/model-v1/, the results committed on 2026-11-30) and after (proof-results/).

Usage: python3 scripts/model_change_tables.py [proof-results]

For each experiment present in both sets: per strategy, the mean over seeds of TTFT P50 and P90,
their change against random (same seed, averaged), and the hit rate, before -> after. Every figure
comes from the JSON files; nothing is typed in.
"""
import json
import os
import sys
from collections import defaultdict

out = sys.argv[1] if len(sys.argv) > 1 else "proof-results"
before_dir = os.path.join(out, "model-v1")

EXPERIMENTS = [
    ("simulate, long-context, 1 hour, 70% load", "sim-long-context.json"),
    ("simulate, sharegpt-like, 1 hour, 70% load", "sim-sharegpt-like.json"),
    ("simulate, closed loop, 56 users, long-context", "closed.json"),
    ("peers, long-context", "peers-long-context.json"),
    ("peers, agentic", "peers-agentic.json"),
    ("peers, long-context with scale events", "peers-scale.json"),
]


# Strategies renamed since the before set: haproxy-chash-bl ran at factor 150 then.
RENAMED = {"haproxy-chash-bl": "haproxy-chash-bl-f150"}


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        runs = json.load(f)
    for r in runs:
        r["strategy"] = RENAMED.get(r["strategy"], r["strategy"])
    return runs


def demo_runs(base):
    runs = []
    for seed in (1, 2, 3):
        r = load(os.path.join(base, f"demo-seed{seed}", "results.json"))
        if r:
            runs.extend(r)
    return runs or None


def summary(runs):
    """strategy -> (p50, p90, p50 change vs random, p90 change vs random, hit rate), seed means."""
    by = defaultdict(dict)
    for r in runs:
        assert r["seed"] not in by[r["strategy"]], f"two runs of {r['strategy']} on seed {r['seed']}"
        by[r["strategy"]][r["seed"]] = r
    base = by.get("random", {})
    result = {}
    for strategy, seeds in by.items():
        n = len(seeds)
        p50 = sum(r["ttft_p50_s"] for r in seeds.values()) / n
        p90 = sum(r["ttft_p90_s"] for r in seeds.values()) / n
        ch50 = [100 * (r["ttft_p50_s"] / base[s]["ttft_p50_s"] - 1) for s, r in seeds.items() if s in base]
        ch90 = [100 * (r["ttft_p90_s"] / base[s]["ttft_p90_s"] - 1) for s, r in seeds.items() if s in base]
        hits = [r["hit_rate"] for r in seeds.values() if r.get("hit_rate") is not None]
        result[strategy] = (p50, p90, sum(ch50) / len(ch50) if ch50 else None,
                            sum(ch90) / len(ch90) if ch90 else None,
                            sum(hits) / len(hits) if hits else None, n)
    return result


def fmt_change(x):
    return "-" if x is None else f"{x:+.1f}%"


def fmt_hit(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def table(title, before, after):
    b, a = summary(before), summary(after)
    print(f"\n#### Before / after: {title}\n")
    print("| strategy | TTFT P50 before -> after | P90 before -> after | P50 vs random before -> after | "
          "P90 vs random before -> after | hit rate before -> after | seeds |")
    print("|---|---|---|---|---|---|---|")
    for strategy in sorted(set(a) | set(b), key=lambda s: (s != "random", s)):
        x, y = b.get(strategy), a.get(strategy)
        if not x or not y:
            only = "before" if x else "after"
            print(f"| {strategy} | (only {only}) | | | | | |")
            continue
        print(f"| {strategy} | {x[0]:.3f} -> {y[0]:.3f} s | {x[1]:.3f} -> {y[1]:.3f} s | "
              f"{fmt_change(x[2])} -> {fmt_change(y[2])} | {fmt_change(x[3])} -> {fmt_change(y[3])} | "
              f"{fmt_hit(x[4])} -> {fmt_hit(y[4])} | {y[5]} |")


def main():
    for title, name in EXPERIMENTS:
        before = load(os.path.join(before_dir, name))
        after = load(os.path.join(out, name))
        if before and after:
            table(title, before, after)
    before, after = demo_runs(before_dir), demo_runs(out)
    if before and after:
        for workload in ("long-context", "sharegpt-like"):
            for source, what in (("demo", "live, client-measured TTFT"), ("simulate", "simulated twin")):
                # The demo's prefix-length sweep (simulated prefix-aware runs listed after the
                # comparison, one of them at the default length again) is left out: the first
                # run of each strategy and seed is the comparison's.
                def pick(runs):
                    seen, kept = set(), []
                    for r in runs:
                        key = (r["strategy"], r["seed"])
                        if r["workload"] == workload and r["source"] == source and key not in seen:
                            seen.add(key)
                            kept.append(r)
                    return kept
                if pick(before) and pick(after):
                    table(f"demo ({what}), {workload}", pick(before), pick(after))


if __name__ == "__main__":
    main()
