#!/usr/bin/env python3
"""Before/after markdown of scripts/issue17-cases.sh's results.

Usage: scripts/issue17_tables.py BEFORE_DIR AFTER_DIR
For each case: TTFT P50 and P90, hit rate and the range of per-instance shares of each strategy,
before and after, and each strategy's P90 against the better of random and
least-outstanding-requests in the same run (the issue's reference)."""
import json
import sys
from pathlib import Path

CASES = [("one-key", "one key for all traffic (--prefix-length 1024, --rate 20)"),
         ("agentic-tenant", "hot tenants (agentic, cache_key=tenant)"),
         ("rag", "rag"),
         ("documents-16000", "no reuse (long-context, 16,000 documents)"),
         ("load-200", "overload (long-context, 200% of random's saturation)"),
         ("long-context", "long-context (the benchmark)")]


def load(directory, case):
    runs = json.loads((Path(directory) / f"{case}.json").read_text())
    return {r["strategy"]: r for r in runs}


def cell(r):
    share = r["share"]
    return (f"{r['ttft_p50_s']:.3f} / {r['ttft_p90_s']:.3f} s, {100 * r['hit_rate']:.1f}%, "
            f"{100 * min(share):.1f}-{100 * max(share):.1f}%")


def main():
    before_dir, after_dir = sys.argv[1], sys.argv[2]
    print("| case | strategy | before: P50 / P90, hit rate, shares | after | after P50 / P90 vs "
          "the better of random and LOR |")
    print("|---|---|---|---|---|")
    for case, title in CASES:
        before, after = load(before_dir, case), load(after_dir, case)
        ref50 = min(after[s]["ttft_p50_s"] for s in ("random", "least-outstanding-requests"))
        ref90 = min(after[s]["ttft_p90_s"] for s in ("random", "least-outstanding-requests"))
        for s, r in after.items():
            ratio = f"{r['ttft_p50_s'] / ref50:.2f}x / {r['ttft_p90_s'] / ref90:.2f}x"
            print(f"| {title} | {s} | {cell(before[s])} | {cell(r)} | {ratio} |")
            title = ""


if __name__ == "__main__":
    main()
