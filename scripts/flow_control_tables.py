#!/usr/bin/env python3
"""Tables and checks of scripts/flow-control.sh's runs (issue 23), from simulate's JSON.

  flow_control_tables.py DIR --knee   prints the ceiling at the knee (see flow-control.sh)
  flow_control_tables.py DIR          prints the markdown tables and the acceptance checks
"""
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def extra(run, key):
    return run.get("extra", {}).get(key, 0.0)


def knee(out):
    points = []
    for name in os.listdir(out):
        if name.startswith("knee-") and name.endswith(".json"):
            for run in load(os.path.join(out, name)):
                points.append((int(run["settings"]["max_in_flight"]), run["throughput_rps"]))
    if not points:
        sys.exit("no knee-*.json in " + out)
    best = max(t for _, t in points)
    return min(m for m, t in points if t >= 0.97 * best), sorted(points)


def by_seed(out, name):
    return {int(r["seed"]): r for r in load(os.path.join(out, name + ".json"))}


def main():
    out = sys.argv[1]
    ceiling, points = knee(out)
    if "--knee" in sys.argv:
        print(ceiling)
        return
    lines = ["### The ceiling (450%, seed 1, 600 s, with the queue)", "",
             "| max_in_flight | completed/s | interactive P90 | batch P90 |", "|---:|---:|---:|---:|"]
    for m, _ in points:
        r = load(os.path.join(out, f"knee-{m}.json"))[0]
        lines.append(f"| {m}{' (chosen)' if m == ceiling else ''} | {r['throughput_rps']:.1f} | "
                     f"{extra(r, 'tenant.interactive.ttft_p90_s'):.3f} s | {extra(r, 'tenant.batch.ttft_p90_s'):.3f} s |")
    checks = []
    for load_pct in (150, 450):
        q, p, n = (by_seed(out, f"{k}-{load_pct}") for k in ("queue", "plain", "none"))
        lines += ["", f"### Interactive (band 1, 20%) and batch (band 0, 80%) at {load_pct}% of random's saturation, "
                  f"max_in_flight {ceiling}, 1,800 s", "",
                  "| seed | interactive P90: queue / 429 / none | interactive 429s: queue / 429 | "
                  "batch P90: queue / 429 / none | completed/s: queue / 429 / none | queue vs best |",
                  "|---:|---|---|---|---|---:|"]
        for seed in sorted(q):
            a, b, c = q[seed], p[seed], n[seed]
            ip = [extra(r, "tenant.interactive.ttft_p90_s") for r in (a, b, c)]
            bp = [extra(r, "tenant.batch.ttft_p90_s") for r in (a, b, c)]
            tp = [r["throughput_rps"] for r in (a, b, c)]
            ratio = tp[0] / max(tp[1], tp[2])
            lines.append(f"| {seed} | {ip[0]:.3f} / {ip[1]:.3f} / {ip[2]:.3f} s | "
                         f"{extra(a, 'tenant.interactive.refused'):.0f} / {extra(b, 'tenant.interactive.refused'):.0f} | "
                         f"{bp[0]:.3f} / {bp[1]:.3f} / {bp[2]:.3f} s | {tp[0]:.1f} / {tp[1]:.1f} / {tp[2]:.1f} | "
                         f"{ratio:.3f}x |")
            checks.append((f"{load_pct}% seed {seed}: interactive P90 at least 50% lower than with no limit",
                           ip[0] <= 0.5 * ip[2], f"{ip[0]:.3f} s vs {ip[2]:.3f} s ({100 * (1 - ip[0] / ip[2]):.1f}% lower)"))
            checks.append((f"{load_pct}% seed {seed}: interactive 429s 0", extra(a, "tenant.interactive.refused") == 0,
                           f"{extra(a, 'tenant.interactive.refused'):.0f}"))
            checks.append((f"{load_pct}% seed {seed}: throughput at least 0.97x the best of the other two",
                           ratio >= 0.97, f"{ratio:.3f}x"))
        fn, ff, fo = (by_seed(out, f"{k}-{load_pct}") for k in ("fair-normal", "fair-flood", "fifo-flood"))
        lines += ["", f"### Two tenants in band 0 at {load_pct}%: b at 10x its half (max_in_flight {ceiling}, 900 s)", "",
                  "| seed | a's P90: both at their half | b at 10x, fair | b at 10x, arrival order | "
                  "a's change (fair) | a's 429s (fair / arrival order) |", "|---:|---|---|---|---:|---|"]
        for seed in sorted(fn):
            base, fair, fifo = (extra(r[seed], "tenant.a.ttft_p90_s") for r in (fn, ff, fo))
            change = fair / base - 1
            lines.append(f"| {seed} | {base:.3f} s | {fair:.3f} s | {fifo:.3f} s | {100 * change:+.1f}% | "
                         f"{extra(ff[seed], 'tenant.a.refused'):.0f} / {extra(fo[seed], 'tenant.a.refused'):.0f} |")
            # When a's own half already fills the queue to its deadline, both runs read the
            # deadline: no comparison of fairness can be made there.
            wait = fn[seed]["settings"].get("max_queue_wait_s", 10)
            void = base >= 0.9 * wait
            checks.append((f"{load_pct}% seed {seed}: a's P90 raised at most 20% by b's flood",
                           None if void else change <= 0.20,
                           f"{100 * change:+.1f}%" + (f" (void: a's P90 at its half is already at the {wait:.0f} s "
                                                       "queue deadline)" if void else "")))
    lines += ["", "### Checks", ""]
    for what, ok, figure in checks:
        lines.append(f"- {'VOID' if ok is None else 'PASS' if ok else 'FAIL'}: {what}: {figure}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
