#!/usr/bin/env python3
"""Merges a partial robustness run into a full one.

A routing change that touches only some strategies (say prefix-aware) need not rerun the whole
matrix (about 100 minutes on 2 cores): `ROBUSTNESS_STRATEGIES=random,least-outstanding-requests,
prefix-aware,prefix-aware-least-loaded scripts/robustness.sh` reruns those rows (about a third of
the time), and this script puts the rows of the changed strategies into the full run's groups.

The simulator is deterministic (a run's result depends on its seed and settings only), so a row
of an unchanged strategy must come out of the partial run exactly as it is in the full run. The
script checks that for every run of the strategies named with --unchanged (compares every scalar
field and the shares) and refuses to merge when one differs: the change then touched more than
it was meant to, and the full matrix has to be rerun.

Usage: robustness_merge.py FULL_DIR PARTIAL_DIR --replace A,B --unchanged C,D
  FULL_DIR     a full run (scripts/robustness.sh), group files GROUP.json or GROUP.json.xz;
               rewritten in place (the same compression), with a line per merge in merges.jsonl
  PARTIAL_DIR  the partial run (its manifest.jsonl names the groups)
Exit status: 0 merged; 1 an unchanged row differs, or a group or run is missing (nothing written).
"""

import argparse
import json
import lzma
import os
import sys


def load(path):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f), path
    with lzma.open(path + ".xz", "rt") as f:
        return json.load(f), path + ".xz"


def save(runs, path):
    text = json.dumps(runs)
    if path.endswith(".xz"):
        with lzma.open(path, "wt", preset=9) as f:
            f.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


def identity(run):
    """What tells a run apart within a group: strategy, seed and its settings."""
    return (run["strategy"], run["seed"], json.dumps(run.get("settings", {}), sort_keys=True))


def comparable(run):
    """The figures of a run, without the fields that record wall time."""
    keep = {k: v for k, v in run.items() if not isinstance(v, (dict, list))}
    keep["share"] = run.get("share")
    return keep


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("full")
    ap.add_argument("partial")
    ap.add_argument("--replace", required=True, help="strategies whose rows the partial run replaces")
    ap.add_argument("--unchanged", default="", help="strategies whose rows must be identical in both")
    a = ap.parse_args(argv)
    replace = set(filter(None, a.replace.split(",")))
    unchanged = set(filter(None, a.unchanged.split(",")))
    with open(os.path.join(a.partial, "manifest.jsonl")) as f:
        groups = [json.loads(line) for line in f if line.strip()]
    merged = []
    for g in groups:
        if g["status"] != "ok":
            print(f"robustness_merge: group {g['group']} of the partial run is {g['status']}", file=sys.stderr)
            return 1
        new, _ = load(os.path.join(a.partial, g["group"] + ".json"))
        old, path = load(os.path.join(a.full, g["group"] + ".json"))
        by_id = {identity(r): r for r in new}
        same = differ = 0
        for r in old:
            if r["strategy"] not in unchanged:
                continue
            other = by_id.get(identity(r))
            if other is None:
                print(f"robustness_merge: {g['group']}: no partial run for {identity(r)[:2]}", file=sys.stderr)
                return 1
            if comparable(other) != comparable(r):
                differ += 1
                print(f"robustness_merge: {g['group']}: {r['strategy']} seed {r['seed']} differs "
                      f"(P50 {r['ttft_p50_s']:.4f} vs {other['ttft_p50_s']:.4f} s)", file=sys.stderr)
            else:
                same += 1
        if differ:
            return 1
        out, replaced = [], 0
        for r in old:
            if r["strategy"] in replace:
                other = by_id.get(identity(r))
                if other is None:
                    print(f"robustness_merge: {g['group']}: no partial run for {identity(r)[:2]}", file=sys.stderr)
                    return 1
                out.append(other)
                replaced += 1
            else:
                out.append(r)
        merged.append((out, path, {"group": g["group"], "replaced": replaced, "identical": same}))
    for out, path, _ in merged:
        save(out, path)
    with open(os.path.join(a.partial, "matrix.json")) as f:
        started = json.load(f).get("started", "")
    with open(os.path.join(a.full, "merges.jsonl"), "a") as f:
        for _, _, line in merged:
            line.update({"replace": sorted(replace), "unchanged": sorted(unchanged),
                         "partial_run_started": started})
            f.write(json.dumps(line) + "\n")
    for _, _, line in merged:
        print(f"robustness_merge: {line['group']}: {line['replaced']} runs replaced, "
              f"{line['identical']} unchanged runs identical")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
