#!/usr/bin/env python3
"""The managed service's 16 configurations, live on loopback (issue 25).

{single-model endpoint, inference-component endpoint with two components}
x {native Invoke API (/invocations, body bytes, X-Amzn-SageMaker-Prefix-Aware-Id),
   OpenAI chat (message characters, prompt_cache_key)}
x {long-context, sharegpt-like} x {random, prefix-aware} = 16 runs.

Each run starts 7 fresh engine emulators (cold caches; Llama 3.1 70B on 8 x H100, modelled and
time-scaled) and the gateway with `--compat sagemaker` (the managed service's behaviour), then
drives it with `prefix-router bench` at 70% of random routing's saturation throughput (found by
`prefix-router simulate` for the workload). The inference-component endpoint places component
ic-a on instances 1-4 and ic-b on instances 5-7 (each engine serves its component; the gateway
learns the names from the engines' /v1/models and pools requests by the
X-Amzn-SageMaker-Inference-Component header); bench spreads requests over both components.

Prints one table row per run, the prefix-aware rows with their change against the matching
random row, beside the figures the source article gives for the workload (it gives them per
workload, not per configuration). Every run must finish with 0 errors: the exit status is 1
otherwise. Usage: scripts/sagemaker-matrix.sh [--seconds S] [--out DIR] [--only N] [--runs 9,14]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

WORKLOADS = {
    # time scale (wall seconds per model second) as the demo's, and the article's figures for the
    # workload (prefix-aware against random): P50 and P90 TTFT change, hit rate, throughput change.
    "long-context": {"scale": 0.15, "article": "article (1 h): P50 -71..-77%, P90 -33..-37%, hit rate ~25% -> up to 82%, throughput +15..16%"},
    "sharegpt-like": {"scale": 0.25, "article": "article (30 min): P50 -13..-16%, P90 -24..-37%, hit rate ~30% -> ~80%, throughput +1.7..2%"},
}
ARTICLE_MINUTES = {"long-context": 60, "sharegpt-like": 30}
INSTANCES = 7
WARMUP_S = 120  # model seconds of traffic first, to warm the caches (--duration counts them too)
COMPONENTS = {"ic-a": range(0, 4), "ic-b": range(4, 7)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, pattern, log_path, timeout=30):
    """Starts `cmd`, waits for `pattern` in its log; returns (process, match)."""
    log = open(log_path, "w+b")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        log.seek(0)
        m = re.search(pattern, log.read().decode(errors="replace"))
        if m:
            return p, m
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    log.seek(0)
    sys.exit(f"sagemaker-matrix: {' '.join(cmd[:2])} did not start; its log ({log_path}):\n"
             + log.read().decode(errors="replace")[-2000:])


def stop(processes):
    for p in processes:
        if p.poll() is None:
            p.terminate()
    for p in processes:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def saturation_rate(binary, workload, out):
    """70% of random routing's saturation throughput, from the simulator (requests/s, model time)."""
    path = os.path.join(out, f"rate-{workload}.json")
    subprocess.run([binary, "simulate", "--workload", workload, "--strategy", "random", "--load", "70",
                    "--duration", "120", "--no-bounds", "--quiet", "--json", path], check=True,
                   stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)[0]["settings"]["rate_rps"]


def run_one(binary, out, endpoint, api, workload, strategy, rate, seconds, index):
    scale = WORKLOADS[workload]["scale"]
    name = f"{index:02d}-{endpoint}-{api}-{workload}-{strategy}"
    procs = []
    try:
        ports = []
        for i in range(INSTANCES):
            cmd = [binary, "engine", "--listen", "127.0.0.1:0", "--time-scale", str(scale),
                   "--enable-prompt-tokens-details", "--stream-interval", "8"]
            if endpoint == "inference-component":
                cmd += ["--inference-component", next(c for c, r in COMPONENTS.items() if i in r)]
            p, m = start(cmd, r"engine emulator on 127\.0\.0\.1:(\d+)", os.path.join(out, f"{name}-engine{i}.log"))
            procs.append(p)
            ports.append(int(m.group(1)))
        gw_port = free_port()
        cmd = [binary, "serve", "--listen", f"127.0.0.1:{gw_port}", "--compat", "sagemaker", "--strategy", strategy]
        for i, port in enumerate(ports):
            cmd += ["--instance", f"instance-{i}=http://127.0.0.1:{port}"]
        p, _ = start(cmd, rf"listening on 127\.0\.0\.1:{gw_port}", os.path.join(out, f"{name}-gateway.log"))
        procs.append(p)
        warmup = int(rate * WARMUP_S)  # requests that warm the caches, left out of every figure
        result = os.path.join(out, f"{name}.json")
        cmd = [binary, "bench", "--url", f"http://127.0.0.1:{gw_port}", "--workload", workload, "--api", api,
               "--rate", f"{rate:.3f}", "--warmup", str(warmup), "--requests", "0",
               "--duration", f"{WARMUP_S + seconds / scale:.1f}", "--time-scale", str(scale), "--strategy", strategy,
               "--instances", str(INSTANCES), "--quiet", "--json", result]
        if endpoint == "inference-component":
            for c in COMPONENTS:
                cmd += ["--inference-component", c]
        with open(os.path.join(out, f"{name}-bench.log"), "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            sys.exit(f"sagemaker-matrix: bench failed for {name} (exit {rc}); see {out}/{name}-bench.log")
        with open(result) as f:
            return json.load(f)[0]
    finally:
        stop(procs)


def pct(new, old):
    return f"{(new - old) / old * 100:+.1f}%" if old else "n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.environ.get("PREFIX_ROUTER_BIN", "build/release/src/prefix-router"))
    ap.add_argument("--seconds", type=float, default=60, help="wall seconds of measured traffic per run (default 60)")
    ap.add_argument("--out", default="sagemaker-matrix-results")
    ap.add_argument("--only", type=int, default=0, help="run only the first N configurations (a smoke run)")
    ap.add_argument("--runs", default="", help="run only these configurations, 1-based, comma-separated (e.g. 9,14)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rates = {w: saturation_rate(a.binary, w, a.out) for w in WORKLOADS}
    configs = [(e, api, w, s) for e in ("single-model", "inference-component") for api in ("native", "chat")
               for w in WORKLOADS for s in ("random", "prefix-aware")]
    numbered = list(enumerate(configs, 1))
    if a.only:
        numbered = numbered[:a.only]
    if a.runs:
        wanted = {int(x) for x in a.runs.split(",")}
        numbered = [(i, c) for i, c in numbered if i in wanted]
    for w, r in rates.items():
        model_min = a.seconds / WORKLOADS[w]["scale"] / 60
        print(f"{w}: {r:.2f} requests/s (70% of random's simulated saturation), {model_min:.1f} min of model time "
              f"per run after 2 min of warm-up (the article ran {ARTICLE_MINUTES[w]} min; the 2-core budget allows "
              f"this much)", flush=True)
    results = []
    header = (f"{'#':>2}  {'endpoint':<19} {'api':<6} {'workload':<13} {'strategy':<12} {'requests':>8} {'errors':>6}  "
              f"{'TTFT P50':<16} {'P90':<16} {'hit rate':>8}  {'throughput':<17} {'share min-max':<13}")
    print(header, flush=True)
    failed = 0
    for i, (endpoint, api, workload, strategy) in numbered:
        r = run_one(a.binary, a.out, endpoint, api, workload, strategy, rates[workload], a.seconds, i)
        results.append({"endpoint": endpoint, "api": api, "run": r})
        base = next((x["run"] for x in results if x["endpoint"] == endpoint and x["api"] == api
                     and x["run"]["workload"] == workload and x["run"]["strategy"] == "random"), None)
        vs = strategy != "random" and base is not None
        p50 = f"{r['ttft_p50_s']:.3f} s" + (f" {pct(r['ttft_p50_s'], base['ttft_p50_s'])}" if vs else "")
        p90 = f"{r['ttft_p90_s']:.3f} s" + (f" {pct(r['ttft_p90_s'], base['ttft_p90_s'])}" if vs else "")
        tp = f"{r['throughput_rps']:.2f} rps" + (f" {pct(r['throughput_rps'], base['throughput_rps'])}" if vs else "")
        hit = "n/a" if r["hit_rate"] is None else f"{r['hit_rate'] * 100:.1f}%"
        share = r.get("share") or []
        shares = f"{min(share) * 100:.1f}-{max(share) * 100:.1f}%" if share else "n/a"
        line = (f"{i:>2}  {endpoint:<19} {api:<6} {workload:<13} {strategy:<12} {r['requests']:>8} {r['errors']:>6}  "
                f"{p50:<16} {p90:<16} {hit:>8}  {tp:<17} {shares:<13}")
        if vs:
            line += "  " + WORKLOADS[workload]["article"]
        print(line, flush=True)
        failed += r["errors"] > 0 or r["requests"] == 0
    with open(os.path.join(a.out, "matrix.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"{len(numbered)} runs, {failed} with errors or no requests; results in {a.out}/ (matrix.json, per-run JSON and logs)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
