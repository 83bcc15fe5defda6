#!/usr/bin/env python3
"""Tables and acceptance checks of the robustness matrix (scripts/robustness.sh).

Usage: python3 scripts/robustness_tables.py RESULTS_DIR [--default NAME] [--report-input PATH]

Reads RESULTS_DIR/matrix.json (the matrix's settings, the default strategy's name),
RESULTS_DIR/manifest.jsonl (one line per `simulate` sweep: its cell group, status, wall time,
expected runs) and each group's results JSON; prints markdown for docs/proof.md and writes
RESULTS_DIR/summary.json (every figure and check). With --report-input, also writes every run into
one results file whose `workload` names the cell, for `prefix-router report` (one block per cell;
the figures are untouched).

Sections: tuning (the tuning seeds, 1-3; the Mooncake trace's first half), held-out seeds (every
other seed, 4-6), held-out trace half (the trace's second half, tuning seeds). Each section gets
the same checks, computed here from the files, never typed:

  "At most R x the reference": the mean over the section's seeds is at most R x the reference's
  mean, and on no single seed is the figure above max(1.05, R) x the reference's in the same run
  (same cell and seed).
  1. default vs the better of random and least-outstanding-requests (the one with the lower
     mean), TTFT P50 and P90: at most 1.02 x, every cell.
  2. Mooncake cells: default vs the best peer (lowest mean among the peers' re-implementations),
     P50 and P90: at most 1.02 x.
  3. prefix-aware vs least-outstanding-requests, P50 and P90: at most 1.05 x, every cell; on the
     long-context benchmark's own cells (640 documents, uniform, 7 instances, 70% load, prefix
     length 2048): P50 at least 70% below random's on every seed and every instance's share within
     13.3-15.4% on every seed.
  4. Shares: on every seed where every instance's share under random is within 1/N +-10%
     (relative), the default's are too (n/a when random's never are).
  5. Completion: every sweep exited 0 within its time limit and wrote every run; errors per cell.

The default's rows: the strategy named by --default, else matrix.json's default_strategy; a
strategy name that starts with it followed by a space, "(", "=", ":" or "@" counts too (so a
`default` strategy labelled e.g. "default (cache-aware)" is found). A run whose settings carry
is_default = 1 is the default's whatever its name.
Exit 0 whether or not the checks hold (they are reported as they are); 1 when the directory has
no results.
"""
import json
import lzma
import math
import os
import sys
from collections import defaultdict

BASELINES = ("random", "least-outstanding-requests")
PEERS = ("sglang-cache-aware", "sglang-cache-aware-min-load", "llm-d-prefix", "dynamo-kv",
         "haproxy-chash-bl-f0", "haproxy-chash-bl-f150", "haproxy-chash-bl")
SECTIONS = (
    ("tuning", "Tuning seeds"),
    ("held-out-seeds", "Held out: seeds"),
    ("held-out-half", "Held out: the Mooncake trace's second half"),
)
METRICS = (("ttft_p50_s", "P50"), ("ttft_p90_s", "P90"))
BAND_7 = (0.133, 0.154)  # the published benchmark's per-instance range, 7 instances


def mean(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else float("nan")


def shares(run):
    return [x for x in run.get("share", []) if x is not None and x == x]


def fleet_size(run):
    return run.get("instances") or len(run.get("share", []))


def within_relative(run, rel=0.10):
    n = fleet_size(run)
    s = shares(run)
    if not n or not s:
        return False
    ideal = 1.0 / n
    return all(ideal * (1 - rel) - 1e-12 <= x <= ideal * (1 + rel) + 1e-12 for x in s) and len(s) == n


def max_share(run):
    s = shares(run)
    return max(s) if s else float("nan")


def parse_seeds(text):
    return [int(x) for x in str(text).split(",") if x.strip()]


def fmt_s(x):
    return "-" if x != x else f"{x:.3f} s"


def fmt_pct(x):
    return "-" if x is None or x != x else f"{100 * x:.1f}%"


def fmt_ratio(x):
    return "-" if x != x else f"{x:.3f}x"


class Matrix:
    def __init__(self, directory, default_name=None):
        self.dir = directory
        with open(os.path.join(directory, "matrix.json")) as f:
            self.meta = json.load(f)
        self.default_name = default_name or self.meta.get("default_strategy", "default")
        self.tuning_seeds = set(parse_seeds(self.meta.get("tuning_seeds", "1,2,3")))
        self.groups = []
        with open(os.path.join(directory, "manifest.jsonl")) as f:
            for line in f:
                if line.strip():
                    self.groups.append(json.loads(line))
        # cell id -> {label, group, part, params, split, value, runs: [..]}
        self.cells = {}
        self.order = []
        for g in self.groups:
            path = os.path.join(directory, g["file"])
            runs = []
            # A committed matrix keeps each sweep's results xz-compressed (FILE.json.xz).
            opener = open
            if not os.path.exists(path) and os.path.exists(path + ".xz"):
                path, opener = path + ".xz", lzma.open
            if os.path.exists(path):
                try:
                    with opener(path, "rt") as f:
                        runs = json.load(f)
                except (OSError, ValueError, lzma.LZMAError):
                    runs = []
            g["_runs"] = runs
            by_value = defaultdict(list)
            for r in runs:
                by_value[self.split_value(g, r)].append(r)
            values = sorted(by_value) if by_value else [None]
            for v in values:
                cid = g["group"] if v is None else f"{g['group']}:{v:g}"
                cell = dict(id=cid, group=g["group"], label=self.cell_label(g, v), part=g["part"],
                            params=g.get("params", ""), split=g["split"], value=v,
                            runs=by_value.get(v, []), manifest=g)
                self.cells[cid] = cell
                self.order.append(cid)

    @staticmethod
    def split_value(group, run):
        k = group["split"]
        if k == "-":
            return None
        if k == "instances":
            return float(run["instances"])
        return float(run["settings"].get(k, float("nan")))

    @staticmethod
    def cell_label(group, v):
        if v is None:
            return group["label"]
        k = group["split"]
        if k == "prefix_length":
            return f"{group['label']}, prefix length {v:g}"
        if k == "load_pct":
            return f"{group['label']}, load {v:g}%"
        if k == "instances":
            return f"{group['label']}, {v:g} instances"
        return f"{group['label']}, {k} {v:g}"

    def is_default(self, run):
        if run.get("settings", {}).get("is_default") == 1:
            return True
        s, d = run["strategy"], self.default_name
        return s == d or (s.startswith(d) and s[len(d)] in " (=:@")

    def section_of(self, cell, seed):
        if cell["part"] == "held-out-half":
            return "held-out-half"
        return "tuning" if seed in self.tuning_seeds else "held-out-seeds"

    def is_long_context_base(self, cell, run):
        s = run["settings"]
        return (run["workload"] == "long-context" and cell["params"] == "" and run["instances"] == 7
                and s.get("prefix_length") == 2048 and s.get("load_pct", 70) == 70)

    def table(self, cell, section):
        """strategy -> seed -> run, for one section; the default's rows under "default"."""
        t = defaultdict(dict)
        for r in cell["runs"]:
            if self.section_of(cell, r["seed"]) != section:
                continue
            t[r["strategy"]][r["seed"]] = r
            if self.is_default(r):
                t["__default__"][r["seed"]] = r
        return t


def at_most(x, ref, ratio, metric):
    """x, ref: seed -> run. The "at most R x" check; None when either side has no run."""
    seeds = sorted(set(x) & set(ref))
    if not seeds:
        return None
    xm = mean(x[s][metric] for s in seeds)
    rm = mean(ref[s][metric] for s in seeds)
    per_seed = {s: (x[s][metric] / ref[s][metric] if ref[s][metric] > 0 else float("inf")) for s in seeds}
    worst_seed = max(per_seed, key=per_seed.get)
    mean_ratio = xm / rm if rm > 0 else float("inf")
    cap = max(1.05, ratio)
    ok = xm <= ratio * rm + 1e-12 and all(v <= cap + 1e-12 for v in per_seed.values())
    return dict(value=xm, reference=rm, mean_ratio=mean_ratio, worst_seed=worst_seed,
                worst_seed_ratio=per_seed[worst_seed], limit=ratio, seed_limit=cap, passed=ok,
                seeds=seeds)


def verdict(ok):
    return "n/a" if ok is None else ("pass" if ok else "**FAIL**")


def check_cells(m, section):
    """Every check of one section: criterion -> list of rows (dicts)."""
    out = defaultdict(list)
    for cid in m.order:
        cell = m.cells[cid]
        t = m.table(cell, section)
        if not t:
            continue
        default = t.get("__default__", {})
        label = cell["label"]
        # 1. default vs the better of random and least-outstanding-requests.
        row = dict(cell=label, id=cid, checks={})
        for metric, name in METRICS:
            refs = [b for b in BASELINES if t.get(b)]
            if not refs or not default:
                row["checks"][name] = None
                continue
            best = min(refs, key=lambda b: mean(r[metric] for r in t[b].values()))
            c = at_most(default, t[best], 1.02, metric)
            if c:
                c["reference_strategy"] = best
            row["checks"][name] = c
        out["default-vs-baselines"].append(row)
        # 2. Mooncake: default vs the best peer.
        if cell["group"].startswith("mooncake"):
            row = dict(cell=label, id=cid, checks={})
            for metric, name in METRICS:
                peers = [p for p in PEERS if t.get(p)]
                if not peers or not default:
                    row["checks"][name] = None
                    continue
                best = min(peers, key=lambda p: mean(r[metric] for r in t[p].values()))
                c = at_most(default, t[best], 1.02, metric)
                if c:
                    c["reference_strategy"] = best
                row["checks"][name] = c
            out["default-vs-peers"].append(row)
        # 3. prefix-aware vs least-outstanding-requests; its long-context figures.
        pa, lor, rnd = t.get("prefix-aware", {}), t.get("least-outstanding-requests", {}), t.get("random", {})
        row = dict(cell=label, id=cid, checks={})
        for metric, name in METRICS:
            c = at_most(pa, lor, 1.05, metric) if pa and lor else None
            if c:
                c["reference_strategy"] = "least-outstanding-requests"
            row["checks"][name] = c
        out["prefix-aware-vs-lor"].append(row)
        base = [r for r in pa.values() if m.is_long_context_base(cell, r)]
        if base and rnd:
            seeds = sorted(s for s in pa if s in rnd)
            cuts = {s: 1 - pa[s]["ttft_p50_s"] / rnd[s]["ttft_p50_s"] for s in seeds}
            bands = {s: (min(shares(pa[s])), max(shares(pa[s]))) for s in seeds}
            cut_ok = all(v >= 0.70 - 1e-12 for v in cuts.values())
            band_ok = all(BAND_7[0] - 1e-12 <= lo and hi <= BAND_7[1] + 1e-12 for lo, hi in bands.values())
            out["prefix-aware-long-context"].append(dict(
                cell=label, id=cid, p50_cut_mean=mean(cuts.values()), p50_cut_min=min(cuts.values()),
                p50_cut_passed=cut_ok, share_min=min(lo for lo, _ in bands.values()),
                share_max=max(hi for _, hi in bands.values()), shares_passed=band_ok, seeds=seeds))
        # 4. The default's shares within 1/N +-10% wherever random's are.
        if rnd and default:
            seeds = sorted(s for s in default if s in rnd)
            applicable = [s for s in seeds if within_relative(rnd[s])]
            bad = [s for s in applicable if not within_relative(default[s])]
            n = fleet_size(next(iter(rnd.values())))
            out["shares"].append(dict(
                cell=label, id=cid, instances=n, seeds=seeds, random_within=applicable,
                default_outside=bad,
                default_min=min(min(shares(default[s])) for s in seeds),
                default_max=max(max(shares(default[s])) for s in seeds),
                random_min=min(min(shares(rnd[s])) for s in seeds),
                random_max=max(max(shares(rnd[s])) for s in seeds),
                passed=None if not applicable else not bad))
    return out


def check_line(c, name):
    if c is None:
        return "-", "-", "n/a"
    return (f"{fmt_s(c['value'])} / {fmt_s(c['reference'])} ({c['reference_strategy']})",
            f"{fmt_ratio(c['mean_ratio'])} / {fmt_ratio(c['worst_seed_ratio'])} (seed {c['worst_seed']})",
            verdict(c["passed"]))


def print_ratio_table(title, rows, limit):
    print(f"\n#### {title}\n")
    print("| cell | P50: mean / reference's mean | P50: ratio of means / worst seed | P50 | "
          "P90: mean / reference's mean | P90: ratio of means / worst seed | P90 |")
    print("|---|---|---|---|---|---|---|")
    passed = failed = 0
    for row in rows:
        cells = []
        for _, name in METRICS:
            c = row["checks"].get(name)
            cells.extend(check_line(c, name))
            if c is not None:
                passed += c["passed"]
                failed += not c["passed"]
        print(f"| {row['cell']} | " + " | ".join(cells) + " |")
    print(f"\n{passed} of {passed + failed} checks pass (limit {limit}; no seed above max(1.05, limit)).")
    return passed, failed


OVERVIEW = ("random", "least-outstanding-requests", "prefix-aware", "cache-aware", "kv-aware")


def print_overview(m, section, name):
    """One row per cell: TTFT P50 / P90 (mean over the section's seeds) of the baselines, ours,
    the default and the best peer (lowest mean P90)."""
    cols = list(OVERVIEW)
    show_default = m.default_name not in cols
    print(f"\n#### {name}: TTFT P50 / P90 at a glance (mean over seeds)\n")
    print("| cell | " + " | ".join(cols) + (f" | default (`{m.default_name}`)" if show_default else "")
          + " | best peer (lowest P90) |")
    print("|---|" + "---|" * (len(cols) + show_default + 1))
    for cid in m.order:
        cell = m.cells[cid]
        t = m.table(cell, section)
        if not t:
            continue

        def fig(runs):
            if not runs:
                return "-"
            return (f"{mean(r['ttft_p50_s'] for r in runs.values()):.3f} / "
                    f"{mean(r['ttft_p90_s'] for r in runs.values()):.3f} s")

        row = [fig(t.get(c)) for c in cols]
        if show_default:
            row.append(fig(t.get("__default__")))
        peers = [p for p in PEERS if t.get(p)]
        if peers:
            best = min(peers, key=lambda p: mean(r["ttft_p90_s"] for r in t[p].values()))
            row.append(f"{fig(t[best])} ({best})")
        else:
            row.append("-")
        print(f"| {cell['label']} | " + " | ".join(row) + " |")


def section_seeds(m, section):
    seeds = set()
    for cid in m.order:
        cell = m.cells[cid]
        for r in cell["runs"]:
            if m.section_of(cell, r["seed"]) == section:
                seeds.add(r["seed"])
    return sorted(seeds)


def main(argv):
    args = list(argv)
    default_name = report_input = None
    if "--default" in args:
        i = args.index("--default")
        default_name = args[i + 1]
        del args[i:i + 2]
    if "--report-input" in args:
        i = args.index("--report-input")
        report_input = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    m = Matrix(args[0], default_name)
    empty = not any(c["runs"] for c in m.cells.values())
    if empty:
        print(f"robustness_tables.py: no results in {args[0]}", file=sys.stderr)
    meta = m.meta
    summary = dict(matrix=meta, default_strategy=m.default_name, groups=[], sections={}, cells={})

    print("### Robustness matrix\n")
    print(f"`scripts/robustness.sh`: `simulate`, every strategy on every cell; seeds {meta['seeds']} "
          f"(tuning {meta['tuning_seeds']}, the others held out), {meta['duration_s']} s runs "
          f"({meta['warmup_s']} s warm-up), random's saturation from {meta['saturation_duration_s']} s "
          f"closed-loop runs; the Mooncake replays cover each half of the trace whole (the first "
          f"{meta['trace_half_s']} s for tuning, the rest held out). The default strategy: "
          f"`{m.default_name}`." + (" Smoke run." if meta.get("smoke") else ""))
    if not meta.get("mooncake"):
        print("\nThe Mooncake cells did not run (no `mooncake` workload in this build, or left out).")

    # 5. Completion, errors and wall time per sweep and cell.
    print("\n#### Completion and errors (every seed)\n")
    print("| cell | sweep | status | runs / expected (sweep) | requests | per run (min-max) | errors | "
          "sweep wall / CPU time (load average) |")
    print("|---|---|---|---|---|---|---|---|")
    total_wall = 0.0
    for g in m.groups:
        total_wall += g["wall_s"]
        summary["groups"].append({k: v for k, v in g.items() if not k.startswith("_")})
    seen_groups = set()
    unequal = []
    for cid in m.order:
        cell = m.cells[cid]
        g = cell["manifest"]
        first = g["group"] not in seen_groups
        seen_groups.add(g["group"])
        req = sum(r["requests"] for r in cell["runs"])
        per_run = [r["requests"] for r in cell["runs"]] or [0]
        spread = f"{min(per_run):,}-{max(per_run):,}"
        # A trace replay sends the same requests whatever the routing: every run of a seed must
        # count them all (answered or failed).
        if cell["group"].startswith("mooncake"):
            by_seed = defaultdict(set)
            for r in cell["runs"]:
                by_seed[r["seed"]].add(r["requests"])
            same = all(len(v) == 1 for v in by_seed.values())
            spread += " (every run of a seed: the same)" if same else " (**runs of a seed differ**)"
            if not same:
                unequal.append(cell["label"])
        err = sum(r["errors"] for r in cell["runs"])
        status = g["status"] if g["status"] == "ok" else f"**{g['status']}** (exit {g['exit_code']})"
        timing = "(same sweep)"
        if first:
            timing = f"{g['wall_s']:.0f} s"
            if "cpu_s" in g:
                timing += f" / {g['cpu_s']:.0f} s ({g.get('load_average', 0):.1f})"
        print(f"| {cell['label']} | {g['group']} | {status} | {g['runs']} / {g['expected_runs']} | {req:,} | "
              f"{spread} | {err:,} | {timing} |")
    bad = [g["group"] for g in m.groups if g["status"] != "ok"]
    total_cpu = sum(g.get("cpu_s", 0) for g in m.groups)
    print(f"\nSweeps: {len(m.groups)}, wall time {total_wall / 60:.1f} min in all"
          + (f" (CPU {total_cpu / 60:.1f} min)" if total_cpu else "") + "; "
          + ("every one completed with every run." if not bad else f"**not completed: {', '.join(bad)}**."))
    if unequal:
        print(f"**Trace replays whose runs counted different numbers of requests: {', '.join(unequal)}.**")
    summary["completion"] = dict(sweeps=len(m.groups), wall_s=total_wall, cpu_s=total_cpu, not_completed=bad,
                                 trace_request_counts_differ=unequal)
    if empty:
        with open(os.path.join(m.dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        return 1

    for section, title in SECTIONS:
        seeds = section_seeds(m, section)
        if not seeds:
            continue
        name = f"{title} {', '.join(map(str, seeds))}" if section != "held-out-half" else f"{title} (seeds {', '.join(map(str, seeds))})"
        if section == "tuning":
            name = f"Tuning seeds {', '.join(map(str, seeds))}"
        checks = check_cells(m, section)
        s_sum = dict(seeds=seeds, criteria={})
        print(f"\n### {name}")
        print_overview(m, section, name)
        p, f = print_ratio_table(
            f"{name}: the default (`{m.default_name}`) against the better of random and least-outstanding-requests",
            checks["default-vs-baselines"], "1.02x")
        s_sum["criteria"]["default-vs-baselines"] = dict(passed=p, failed=f, rows=checks["default-vs-baselines"])
        if checks.get("default-vs-peers"):
            p, f = print_ratio_table(f"{name}: the default against the best peer (Mooncake cells)",
                                     checks["default-vs-peers"], "1.02x")
            s_sum["criteria"]["default-vs-peers"] = dict(passed=p, failed=f, rows=checks["default-vs-peers"])
        p, f = print_ratio_table(f"{name}: prefix-aware against least-outstanding-requests",
                                 checks["prefix-aware-vs-lor"], "1.05x")
        s_sum["criteria"]["prefix-aware-vs-lor"] = dict(passed=p, failed=f, rows=checks["prefix-aware-vs-lor"])
        rows = checks.get("prefix-aware-long-context", [])
        if rows:
            print(f"\n#### {name}: prefix-aware on the long-context benchmark's cells\n")
            print("| cell | P50 below random: mean / least | >= 70% on every seed | shares min-max | 13.3-15.4% on every seed |")
            print("|---|---|---|---|---|")
            for r in rows:
                print(f"| {r['cell']} | {fmt_pct(r['p50_cut_mean'])} / {fmt_pct(r['p50_cut_min'])} | "
                      f"{verdict(r['p50_cut_passed'])} | {fmt_pct(r['share_min'])}-{fmt_pct(r['share_max'])} | "
                      f"{verdict(r['shares_passed'])} |")
            s_sum["criteria"]["prefix-aware-long-context"] = dict(
                passed=sum(r["p50_cut_passed"] + r["shares_passed"] for r in rows),
                failed=sum((not r["p50_cut_passed"]) + (not r["shares_passed"]) for r in rows), rows=rows)
        rows = checks.get("shares", [])
        if rows:
            print(f"\n#### {name}: the default's per-instance shares within 1/N +-10% where random's are\n")
            print("| cell | N | random's shares: min-max (seeds within) | default's min-max | default outside on seeds | check |")
            print("|---|---|---|---|---|---|")
            for r in rows:
                within = ", ".join(map(str, r["random_within"])) or "none"
                outside = ", ".join(map(str, r["default_outside"])) or "none"
                print(f"| {r['cell']} | {r['instances']} | {fmt_pct(r['random_min'])}-{fmt_pct(r['random_max'])} "
                      f"({within}) | {fmt_pct(r['default_min'])}-{fmt_pct(r['default_max'])} | {outside} | "
                      f"{verdict(r['passed'])} |")
            s_sum["criteria"]["shares"] = dict(passed=sum(r["passed"] is True for r in rows),
                                               failed=sum(r["passed"] is False for r in rows),
                                               not_applicable=sum(r["passed"] is None for r in rows), rows=rows)
        summary["sections"][section] = s_sum

    # Per cell: every strategy's mean over seeds, per section.
    print("\n### Per cell: TTFT P50 / P90, hit rate, largest share (mean over the seeds of each section)")
    for cid in m.order:
        cell = m.cells[cid]
        if not cell["runs"]:
            continue
        sections = [s for s, _ in SECTIONS if m.table(cell, s)]
        heads = {"tuning": "tuning", "held-out-seeds": "held-out seeds", "held-out-half": "held-out half"}
        names = []
        for r in cell["runs"]:
            if r["strategy"] not in names:
                names.append(r["strategy"])
        n = fleet_size(cell["runs"][0])
        print(f"\n#### {cell['label']} ({n} instances; seeds "
              + "; ".join(f"{heads[s]} {', '.join(map(str, sorted({r['seed'] for r in cell['runs'] if m.section_of(cell, r['seed']) == s})))}" for s in sections)
              + ")\n")
        print("| strategy | " + " | ".join(f"{heads[s]}: P50 / P90 / hit / max share" for s in sections) + " | errors |")
        print("|---|" + "---|" * len(sections) + "---|")
        cell_sum = dict(label=cell["label"], group=cell["group"], instances=n, strategies={})
        for name in names:
            row = []
            st = dict(default=False)
            for s in sections:
                rs = list(m.table(cell, s).get(name, {}).values())
                if not rs:
                    row.append("-")
                    continue
                st["default"] = st["default"] or any(m.is_default(r) for r in rs)
                fig = dict(ttft_p50_s=mean(r["ttft_p50_s"] for r in rs), ttft_p90_s=mean(r["ttft_p90_s"] for r in rs),
                           hit_rate=mean(r["hit_rate"] for r in rs), max_share=mean(max_share(r) for r in rs),
                           seeds=sorted(r["seed"] for r in rs),
                           per_seed={r["seed"]: dict(ttft_p50_s=r["ttft_p50_s"], ttft_p90_s=r["ttft_p90_s"],
                                                     hit_rate=r["hit_rate"], share=r["share"],
                                                     requests=r["requests"], errors=r["errors"]) for r in rs})
                st[s] = fig
                row.append(f"{fig['ttft_p50_s']:.3f} / {fig['ttft_p90_s']:.3f} s / {fmt_pct(fig['hit_rate'])} / "
                           f"{fmt_pct(fig['max_share'])}")
            errors = sum(r["errors"] for r in cell["runs"] if r["strategy"] == name)
            label = name + (" (default)" if st["default"] else "")
            print(f"| {label} | " + " | ".join(row) + f" | {errors} |")
            cell_sum["strategies"][name] = st
        summary["cells"][cid] = cell_sum

    with open(os.path.join(m.dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=lambda o: None)
    if report_input:
        runs = []
        for cid in m.order:
            cell = m.cells[cid]
            g = cell["manifest"]
            split = {"prefix_length": "prefix length", "load_pct": "load", "instances": "fleet size"}.get(g["split"])
            name = g["label"] + (f", by {split}" if split else "")
            for r in cell["runs"]:
                r = dict(r)
                r["workload"] = name
                runs.append(r)
        with open(report_input, "w") as f:
            json.dump(runs, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
