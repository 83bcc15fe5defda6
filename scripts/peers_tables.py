#!/usr/bin/env python3
"""Tables and the acceptance check of issue 7 from scripts/peers.sh's results files.

Usage: python3 scripts/peers_tables.py proof-results/peers-*.json

Prints, per experiment (workload, with or without scale events), one markdown table of every
strategy on every seed (TTFT P90, hit rate, per-instance share range), then the check: on every
seed, kv-aware and cache-aware "match or beat" every baseline (each peer re-implementation, the
HAProxy variants also at their tuned key lengths, and the tuned prefix-aware) on TTFT P90 and on hit rate, where "match" means within 2% (relative)
or better: P90 <= 1.02 x the baseline's, hit rate >= 0.98 x the baseline's. Exit 0 whether or
not it holds: the figures are reported as they are.
"""
import json
import sys
from collections import defaultdict

OURS = ("kv-aware", "cache-aware")
# haproxy-chash-bl-f0 is HAProxy's default (hash-balance-factor 0: plain consistent hashing),
# -f150 its documentation's example; both are reported (haproxy-chash-bl alone is -f150, in older
# results files).
PEERS = ("sglang-cache-aware", "llm-d-prefix", "dynamo-kv", "haproxy-chash-bl-f0", "haproxy-chash-bl-f150",
         "haproxy-chash-bl")


def experiment(run):
    scaled = run["settings"].get("scale_events", 0) > 0
    return run["workload"] + (" with scale events" if scaled else "")


def label(run):
    # The strategies keyed on a prefix length (prefix-aware, HAProxy's hash) say which.
    s = run["strategy"]
    if s.startswith("prefix-aware") or s.startswith("haproxy-chash-bl"):
        s += " (prefix length %d)" % run["settings"]["prefix_length"]
    return s


def main(paths):
    runs = []
    for p in paths:
        runs.extend(json.load(open(p)))
    by_exp = defaultdict(list)
    for r in runs:
        by_exp[experiment(r)].append(r)
    failures = []
    for exp, rs in by_exp.items():
        seeds = sorted({r["seed"] for r in rs})
        print("\n#### %s (simulate, 7 instances, 70%% load, seeds %s)\n" % (exp, ", ".join(map(str, seeds))))
        print("| strategy | " + " | ".join("seed %d: P90 / hit / shares" % s for s in seeds) + " |")
        print("|---|" + "---|" * len(seeds))
        names = []
        for r in rs:
            if label(r) not in names:
                names.append(label(r))
        cell = {(label(r), r["seed"]): r for r in rs}
        for n in names:
            row = []
            for s in seeds:
                r = cell.get((n, s))
                if r is None:
                    row.append("-")
                    continue
                sh = [x for x in r["share"] if x == x]
                row.append("%.3f s / %.1f%% / %.1f-%.1f%%" % (r["ttft_p90_s"], 100 * r["hit_rate"],
                                                              100 * min(sh), 100 * max(sh)))
            print("| %s | %s |" % (n, " | ".join(row)))
        baselines = [n for n in names if n.split(" ")[0] in PEERS or "tuned" in n]
        for ours in OURS:
            for s in seeds:
                o = cell.get((ours, s))
                if o is None:
                    continue
                for b in baselines:
                    br = cell.get((b, s))
                    if br is None:
                        continue
                    if o["ttft_p90_s"] > 1.02 * br["ttft_p90_s"]:
                        failures.append("%s, seed %d: %s P90 %.3f s vs %s %.3f s" %
                                        (exp, s, ours, o["ttft_p90_s"], b, br["ttft_p90_s"]))
                    if o["hit_rate"] < 0.98 * br["hit_rate"]:
                        failures.append("%s, seed %d: %s hit rate %.1f%% vs %s %.1f%%" %
                                        (exp, s, ours, 100 * o["hit_rate"], b, 100 * br["hit_rate"]))
    print("\nAcceptance (kv-aware and cache-aware within 2% of or better than every baseline, every seed):")
    if failures:
        print("NOT MET in %d comparison(s):" % len(failures))
        for f in failures:
            print("  - " + f)
    else:
        print("met on every experiment and seed")


if __name__ == "__main__":
    main(sys.argv[1:])
