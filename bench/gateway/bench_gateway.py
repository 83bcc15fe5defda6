#!/usr/bin/env python3
"""The arithmetic of scripts/bench-gateway.sh, out of the shell script.

  bench_gateway.py meta KEY=VALUE ...       print the run's settings as a JSON object
  bench_gateway.py line RAW RUNDIR KEY=VALUE ...
      one load run (wrk's WRK_RESULT or sse_probe's PROBE_RESULT line in RAW) plus the CPU use
      the shell snapshotted around it (RUNDIR/stat.*, pstat.LABEL.*, times.*, perf.txt) as one
      JSON line; exits 3 if the run saw errors, 4 if other processes used over busy_limit% of a
      CPU meanwhile (the shell then repeats it)
  bench_gateway.py summary OUT META_JSON    the markdown tables (stdout) and OUT/summary.json
                                            from OUT/results.jsonl
"""
import csv
import datetime
import json
import os
import re
import statistics
import sys

TARGETS = ["direct", "prefix-router", "haproxy"]
ROUTE_TITLES = {
    "native": "native route: POST /invocations",
    "chat-4k": "OpenAI chat, 4 KB: POST /v1/chat/completions",
    "chat-32k": "OpenAI chat, 32 KB: POST /v1/chat/completions",
    "stream": "streaming: POST /v1/chat/completions, \"stream\": true",
}
med = statistics.median


def kv(args):
    return dict(a.split("=", 1) for a in args)


def cmd_meta(args):
    print(json.dumps(kv(args)))


# ---- one run
def cmd_line(args):
    f, run = args[0], args[1]
    a = kv(args[2:])
    text = open(f).read()
    m = re.search(r"^(WRK_RESULT|PROBE_RESULT) (.*)$", text, re.M)
    if not m:
        sys.exit(f"no WRK_RESULT or PROBE_RESULT line in {f}")
    res = json.loads(m[2])
    if m[1] == "PROBE_RESULT":  # the probe exits 1 at the first bad answer: none got here
        res["rps"] = res["requests"] / (res["duration_us"] / 1e6)
        res["errors"] = {}

    def cpus(name):
        d = {}
        for line in open(f"{run}/stat.{name}"):
            if line.startswith("cpu") and line[3].isdigit():
                k, *v = line.split()
                d[k] = list(map(int, v[:8]))
        return d

    b, af = cpus("before"), cpus("after")
    res["cpu_busy_pct"], res["cpu_steal_pct"] = {}, {}
    for k in sorted(af):
        dv = [x - y for x, y in zip(af[k], b[k])]
        tot = sum(dv) or 1  # user nice system idle iowait irq softirq steal
        res["cpu_busy_pct"][k] = round(100 * (dv[0] + dv[1] + dv[2] + dv[5] + dv[6]) / tot, 1)
        res["cpu_steal_pct"][k] = round(100 * dv[7] / tot, 1)
    hz = os.sysconf("SC_CLK_TCK")
    secs = res["duration_us"] / 1e6
    res["process_cpu_pct"] = {}
    ticks = {}
    for label in filter(None, a.get("labels", "").split(",")):
        try:
            x = open(f"{run}/pstat.{label}.before").read()
            y = open(f"{run}/pstat.{label}.after").read()
            tx = sum(map(int, x.rsplit(")", 1)[1].split()[11:13]))
            ty = sum(map(int, y.rsplit(")", 1)[1].split()[11:13]))
            ticks[label] = ty - tx
            res["process_cpu_pct"][label] = round(100 * (ty - tx) / hz / secs, 1)
        except (OSError, ValueError, IndexError):
            pass

    def child_secs(name):  # second line of bash `times`: children's user and system time
        u, s_ = open(f"{run}/times.{name}").read().split("\n")[1].split()
        m_ = lambda v: int(v.split("m")[0]) * 60 + float(v.split("m")[1].rstrip("s"))
        return m_(u) + m_(s_)

    # The shell's children during the run: wrk or sse_probe (and perf stat, which only counts).
    client = child_secs("after") - child_secs("before")
    res["process_cpu_pct"]["client"] = round(100 * client / secs, 1)
    res["other_cpu_pct"] = round(max(0.0, sum(res["cpu_busy_pct"].values()) - sum(res["process_cpu_pct"].values())), 1)
    res["busy"] = res["other_cpu_pct"] > float(a["busy_limit"])
    if a.get("phase") == "cpu":
        # CPU per request of the proxy under test: perf's task-clock over the run (all its
        # threads), and the same from /proc (clock ticks) as a cross-check.
        req = max(1, res["requests"])
        try:
            for line in open(f"{run}/perf.txt"):
                p = line.strip().split(",")
                if len(p) > 2 and p[2].startswith("task-clock") and p[0] not in ("", "<not counted>"):
                    res["task_clock_ms"] = float(p[0])
                    res["cpu_us_per_request"] = 1000 * float(p[0]) / req
        except OSError:
            pass
        tl = a.get("target_label")
        if tl in ticks:
            res["proc_cpu_us_per_request"] = 1e6 * ticks[tl] / hz / req
    out = {"route": a["route"], "target": a["target"], "phase": a["phase"], "connections": int(a["connections"]),
           "round": int(a["round"]), "attempt": int(a["attempt"]), "raw": os.path.basename(f), **res}
    print(json.dumps(out))
    if any(res["errors"].values()):
        sys.exit(3)
    if res["requests"] == 0:  # not one answer completed within the run: nothing was measured
        print(f"no request completed during the run ({f})", file=sys.stderr)
        sys.exit(3)
    if res["busy"]:
        sys.exit(4)


# ---- summary
def clean(rs):  # the runs during which the machine was otherwise idle, if there are any
    return [j for j in rs if not j.get("busy")] or rs


def median_run(rs):  # the run holding the median requests/s (lower middle for even counts)
    rs = sorted(rs, key=lambda j: j["rps"])
    return rs[(len(rs) - 1) // 2]


def route_results(runs, events):
    res = {}
    for t in TARGETS:
        mine = [j for j in runs if j["target"] == t]
        lat = clean([j for j in mine if j["phase"] == "latency"])
        peak = {}
        for j in mine:
            if j["phase"] == "peak":
                peak.setdefault(j["connections"], []).append(j)
        if not lat or not peak:
            continue
        peak = {c: clean(v) for c, v in peak.items()}
        by_c = {c: med([j["rps"] for j in v]) for c, v in sorted(peak.items())}
        best_c = max(by_c, key=by_c.get)
        mr = median_run(peak[best_c])
        proc = {"direct": "upstream"}.get(t, t)
        r = res[t] = {
            "p50_us": med([j["p50_us"] for j in lat]), "p99_us": med([j["p99_us"] for j in lat]),
            "latency_runs_used": len(lat),
            "p50_us_rounds": [j["p50_us"] for j in lat], "p99_us_rounds": [j["p99_us"] for j in lat],
            "c1_rps": med([j["rps"] for j in lat]),
            "peak_rps": by_c[best_c], "peak_connections": best_c,
            "peak_rps_by_connections": {str(c): v for c, v in by_c.items()},
            "peak_rps_rounds": {str(c): [j["rps"] for j in v] for c, v in sorted(peak.items())},
            "peak_p99_us": med([j["p99_us"] for j in peak[best_c]]),
            "peak_process_cpu_pct": mr["process_cpu_pct"].get(proc),
            "peak_cpu_busy_pct": mr["cpu_busy_pct"], "peak_cpu_steal_pct": mr["cpu_steal_pct"],
            "peak_other_cpu_pct": mr.get("other_cpu_pct"),
            "errors": sum(sum(j["errors"].values()) for j in mine),
        }
        if events:
            r["peak_events_per_s"] = r["peak_rps"] * events
            ev = clean([j for j in mine if j["phase"] == "event-delay"])
            if ev:
                for k in ("delay_p50_us", "delay_p90_us", "delay_p99_us", "first_event_p50_us"):
                    r["event_" + k if not k.startswith("first") else k] = med([j[k] for j in ev])
                r["event_delay_samples"] = sum(j["delay_samples"] for j in ev)
    if "direct" not in res:
        return res
    d = res["direct"]
    for t in ("prefix-router", "haproxy"):
        if t not in res:
            continue
        r = res[t]
        r["added_p50_us"] = r["p50_us"] - d["p50_us"]
        r["added_p99_us"] = r["p99_us"] - d["p99_us"]
        r["peak_vs_direct"] = r["peak_rps"] / d["peak_rps"]
        if "haproxy" in res:
            r["peak_vs_haproxy"] = r["peak_rps"] / res["haproxy"]["peak_rps"]
        cpu = r["peak_process_cpu_pct"]
        r["peak_rps_per_proxy_cpu"] = r["peak_rps"] / (cpu / 100) if cpu else None
        if events:
            r["added_per_event_us"] = r["added_p50_us"] / events
            if "event_delay_p50_us" in r and "event_delay_p50_us" in d:
                r["added_event_delay_p50_us"] = r["event_delay_p50_us"] - d["event_delay_p50_us"]
                r["added_event_delay_p99_us"] = r["event_delay_p99_us"] - d["event_delay_p99_us"]
    return res


def distribution(out, route):
    dist = {"prefix-router": {}, "haproxy": {}}
    try:
        for line in open(f"{out}/prefix-router-metrics-{route}.txt"):
            m = re.match(r'prefix_router_requests_total\{instance="([^"]*)",[^}]*decision="([^"]*)"\} (\d+)', line)
            if m:
                dist["prefix-router"].setdefault(m[1], {})[m[2]] = int(m[3])
        for row in csv.reader(open(f"{out}/haproxy-stats-{route}.csv")):
            if len(row) > 7 and row[0] == "instances" and row[1] not in ("FRONTEND", "BACKEND"):
                dist["haproxy"][row[1]] = int(row[7] or 0)
    except OSError:
        pass
    return dist


def x(a, b):
    return f"{a / b:.2f}x" if b and b > 0 else "-"


def pct(v):
    return "-" if v is None else f"{v:.0f}%"


def cmd_summary(args):
    out, meta_file = args
    meta = json.load(open(meta_file))
    runs = [json.loads(l) for l in open(f"{out}/results.jsonl")]
    events = int(meta["events"])
    lc, pc = f"cpu{meta['load_cpu']}", f"cpu{meta['proxy_cpu']}"
    routes = [r for r in meta["routes"].split(",") if r]
    print(f"{meta['prefix_router_version']} ({meta['commit']}, binary built {meta['binary_built']}), "
          f"{meta['haproxy_version'].split(' - ')[0]}, {meta['nginx_version'].split(': ')[-1]}, "
          f"{meta['wrk_version'].split(' Copyright')[0]}.")
    print()
    print(f"{meta['threads']} proxy thread(s); {meta['placement']}; prefix {int(meta['prefix']):,} (bytes of the "
          f"native body, characters of the chat messages, bytes of the JSON for HAProxy); 3 upstream instances; "
          f"median of {meta['rounds']} interleaved round(s) of {meta['duration']} s (of the rounds during which the "
          f"machine was otherwise idle).")
    summary_routes = {}
    for route in routes:
        rr = [j for j in runs if j["route"] == route]
        ev = events if route == "stream" else 0
        res = route_results(rr, ev)
        dist = distribution(out, route)
        summary_routes[route] = {"results": res, "requests_per_instance": dist,
                                 "body_bytes": int(meta[f"body_bytes_{route}"])}
        print()
        print(f"### {ROUTE_TITLES[route]} ({int(meta[f'body_bytes_{route}']):,}-byte body"
              + (f"; {events} events per answer, each its own chunk" if ev else "") + ")")
        print()
        if not all(t in res for t in TARGETS):
            print(f"(incomplete: no latency or peak runs for {', '.join(t for t in TARGETS if t not in res)})")
            continue
        d, hp = res["direct"], res["haproxy"]
        unit = "events/s" if ev else "req/s"
        lat_name = "to last event" if ev else ""
        print(f"| path | p50 (c=1){' ' + lat_name if ev else ''} | p99 (c=1) | added p50 | added p99 | added p50 vs HAProxy's "
              f"| peak {unit} (connections) | vs direct | vs HAProxy | proxy CPU at peak | load CPU busy at peak |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for t in TARGETS:
            r = res[t]
            pk = r["peak_events_per_s"] if ev else r["peak_rps"]
            peak = f"{pk:,.0f} ({r['peak_connections']})"
            busy = pct(r["peak_cpu_busy_pct"].get(lc)) if meta["load_cpu"] else "-"
            if t == "direct":
                name = "direct to upstream (sse_upstream)" if ev else "direct to upstream (nginx)"
                print(f"| {name} | {r['p50_us']:.0f} us | {r['p99_us']:.0f} us | - | - | - | {peak} | "
                      f"1.00x | {x(r['peak_rps'], hp['peak_rps'])} | - | {busy} |")
            else:
                print(f"| {t} | {r['p50_us']:.0f} us | {r['p99_us']:.0f} us | {r['added_p50_us']:.0f} us | "
                      f"{r['added_p99_us']:.0f} us | {x(r['added_p50_us'], hp['added_p50_us'])} | {peak} | "
                      f"{r['peak_vs_direct']:.2f}x | {r['peak_vs_haproxy']:.2f}x | {pct(r['peak_process_cpu_pct'])} | {busy} |")
        if ev:
            print()
            print(f"Per event: added latency per event = added p50 to the last event / {events} (unpaced stream, "
                  f"c=1); event delay = each event's time from the upstream's write to the client's read, with the "
                  f"events {meta['stream_gap_us']} us apart (sse_probe, one connection; medians of rounds).")
            print()
            print("| path | added per event (unpaced) | event delay p50 | p90 | p99 | added delay p50 | added delay p99 | events measured |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            for t in TARGETS:
                r = res[t]
                if "event_delay_p50_us" not in r:
                    print(f"| {t} | - | (no event-delay run) | | | | | |")
                    continue
                added = "-" if t == "direct" else f"{r['added_per_event_us']:.2f} us"
                ad50 = "-" if t == "direct" else f"{r.get('added_event_delay_p50_us', 0):.0f} us"
                ad99 = "-" if t == "direct" else f"{r.get('added_event_delay_p99_us', 0):.0f} us"
                print(f"| {t} | {added} | {r['event_delay_p50_us']:.0f} us | {r['event_delay_p90_us']:.0f} us | "
                      f"{r['event_delay_p99_us']:.0f} us | {ad50} | {ad99} | {r['event_delay_samples']:,} |")
        if meta["load_cpu"]:
            for t in ("prefix-router", "haproxy"):
                r = res[t]
                if ((r["peak_process_cpu_pct"] or 0) < 90 and (r["peak_cpu_busy_pct"].get(lc) or 0) > 90
                        and (r["peak_other_cpu_pct"] or 0) <= float(meta["busy_limit"])):
                    print()
                    print(f"Note: at {t}'s peak its CPU was {pct(r['peak_process_cpu_pct'])} busy and the load "
                          f"generator's CPU {pct(r['peak_cpu_busy_pct'].get(lc))}: the client and upstream, not {t}, "
                          f"set that peak.")
        cs = sorted({int(c) for t in TARGETS for c in res[t]["peak_rps_by_connections"]})
        if len(cs) > 1:
            print()
            print(f"Requests/s by connections (median of rounds; every round in summary.json):")
            print()
            print("| path | " + " | ".join(f"c={c}" for c in cs) + " |")
            print("|---|" + "---:|" * len(cs))
            for t in TARGETS:
                print(f"| {t} | " + " | ".join(f"{res[t]['peak_rps_by_connections'].get(str(c), 0):,.0f}" for c in cs) + " |")
        print()
        print("Requests per instance over the route's runs: prefix-router " +
              ", ".join(f"{k} {sum(v.values()):,} ({', '.join(f'{d_} {n:,}' for d_, n in sorted(v.items()))})"
                        for k, v in sorted(dist["prefix-router"].items())) +
              "; HAProxy " + ", ".join(f"{k} {v:,}" for k, v in sorted(dist["haproxy"].items())) + ".")

    # ---- all routes at a glance, and the goals
    done = [r for r in routes if all(t in summary_routes[r]["results"] for t in TARGETS)]
    goals = {}
    if done:
        print()
        print("### All routes: prefix-router against HAProxy")
        print()
        print("| route | added p50: prefix-router | HAProxy | peak: prefix-router | HAProxy | peak vs HAProxy |")
        print("|---|---:|---:|---:|---:|---:|")
        for route in done:
            res = summary_routes[route]["results"]
            pr, hp = res["prefix-router"], res["haproxy"]
            unit = "events/s" if route == "stream" else "req/s"
            k = "peak_events_per_s" if route == "stream" else "peak_rps"
            print(f"| {route} | {pr['added_p50_us']:.0f} us | {hp['added_p50_us']:.0f} us | {pr[k]:,.0f} {unit} | "
                  f"{hp[k]:,.0f} {unit} | {pr['peak_vs_haproxy']:.2f}x |")
        if "native" in done:
            pr, hp = summary_routes["native"]["results"]["prefix-router"], summary_routes["native"]["results"]["haproxy"]
            goals["native_added_p50_under_100us"] = pr["added_p50_us"] < 100
            goals["native_peak_at_least_haproxy"] = pr["peak_rps"] >= hp["peak_rps"]
            print()
            print(f"Goal (native route, under 100 us added at p50): "
                  f"{'met' if goals['native_added_p50_under_100us'] else 'NOT met'} "
                  f"({pr['added_p50_us']:.0f} us; HAProxy adds {hp['added_p50_us']:.0f} us).")
            print(f"Goal (native route, peak throughput at least HAProxy's): "
                  f"{'met' if goals['native_peak_at_least_haproxy'] else 'NOT met'} "
                  f"({pr['peak_rps']:,.0f} vs {hp['peak_rps']:,.0f} req/s, {pr['peak_vs_haproxy']:.2f}x).")

    # ---- CPU per request, one thread against two
    cpu = {}
    cruns = [j for j in runs if j["phase"] == "cpu"]
    if cruns:
        for t in sorted({j["target"] for j in cruns}):
            rs = clean([j for j in cruns if j["target"] == t])
            per = [j["cpu_us_per_request"] for j in rs if "cpu_us_per_request" in j]
            proc = [j["proc_cpu_us_per_request"] for j in rs if "proc_cpu_us_per_request" in j]
            cpu[t] = {"rps": med([j["rps"] for j in rs]),
                      "cpu_us_per_request": med(per) if per else None,
                      "cpu_us_per_request_rounds": per,
                      "proc_cpu_us_per_request": med(proc) if proc else None,
                      "p50_us": med([j["p50_us"] for j in rs]), "runs_used": len(rs)}
        print()
        print(f"### CPU per proxied request, one I/O thread against two (native route)")
        print()
        print(f"Fixed load below saturation: wrk -c{meta['cpu_connections']}, each connection pausing "
              f"{meta['cpu_pause_ms']} ms after each answer; both threads on the proxy's CPU ({meta['placement']}); "
              f"CPU = `perf stat -e task-clock` on the proxy process over the run (all its threads), divided by "
              f"the requests wrk completed; /proc's utime+stime as a cross-check. Median of rounds.")
        print()
        print("| proxy | threads | req/s | p50 | CPU per request (perf) | (/proc) | vs one thread |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name in ("prefix-router", "haproxy"):
            one = cpu.get(f"{name}-1t", {}).get("cpu_us_per_request")
            for n in (1, 2):
                c = cpu.get(f"{name}-{n}t")
                if not c:
                    continue
                v = c["cpu_us_per_request"]
                ratio = (v / one) if (v and one) else None
                if ratio is not None:
                    c["vs_one_thread"] = ratio
                pc_ = c["proc_cpu_us_per_request"]
                print(f"| {name} | {n} | {c['rps']:,.0f} | {c['p50_us']:.0f} us | "
                      f"{'-' if v is None else f'{v:.1f} us'} | {'-' if pc_ is None else f'{pc_:.1f} us'} | "
                      f"{'-' if ratio is None else f'{ratio:.2f}x'} |")
        for name in ("prefix-router", "haproxy"):
            one, two = cpu.get(f"{name}-1t"), cpu.get(f"{name}-2t")
            if one and two and abs(two["rps"] / one["rps"] - 1) > 0.1:
                print()
                print(f"Note: {name}'s one- and two-thread runs ran at rates {abs(two['rps'] / one['rps'] - 1):.0%} "
                      f"apart ({one['rps']:,.0f} and {two['rps']:,.0f} req/s; wrk's load is closed-loop, so a "
                      f"slower proxy gets fewer requests): CPU per request falls as load rises (more requests "
                      f"per wake-up), so that ratio is not like for like.")
        r2 = cpu.get("prefix-router-2t", {}).get("vs_one_thread")
        if r2 is not None:
            goals["two_threads_cpu_per_request_at_most_1.1x"] = r2 <= 1.1
            print()
            print(f"Goal (two threads: CPU per proxied request at most 1.1x one thread's): "
                  f"{'met' if r2 <= 1.1 else 'NOT met'} ({r2:.2f}x).")

    # ---- the machine
    other = [j.get("other_cpu_pct", 0) for j in runs] or [0]
    busy_runs = sum(1 for j in runs if j.get("busy"))
    groups = {}
    for j in runs:
        groups.setdefault((j["route"], j["target"], j["phase"], j["connections"]), []).append(j)
    unclean = [f"{r_} {t} {ph} c={c}" for (r_, t, ph, c), v in groups.items() if all(j.get("busy") for j in v)]
    repeated = sum(j.get("attempt", 0) for j in runs)
    print()
    print(f"CPU used by other processes on the machine during the kept load runs: median {med(other):.0f}%, "
          f"max {max(other):.0f}% of one CPU; {repeated} repeat(s) of runs during which it was busy" +
          (f" -- WARNING: {busy_runs} of {len(runs)} kept runs still shared the machine with other work "
           f"(over {meta['busy_limit']}% of a CPU). Medians leave them out where a measurement has a clean run; "
           + ("these have none, so their numbers are not reliable: " + ", ".join(unclean) + "."
              if unclean else "every measurement had one.") if busy_runs else "."))
    errors = int(meta["errors"])
    if errors:
        print()
        print(f"ERRORS: {errors} load run(s) saw socket errors, non-2xx responses or malformed streams "
              f"(see {out}/wrk-*.txt and probe-*.txt).")
    summary = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "settings": {k: v for k, v in meta.items() if not k.endswith("_version")},
               "versions": {k: v for k, v in meta.items() if k.endswith("_version")},
               "routes": summary_routes, "cpu_per_request": cpu, "goals": goals,
               "other_cpu_pct": {"median": med(other), "max": max(other), "busy_runs_kept": busy_runs,
                                 "measurements_without_clean_run": unclean, "runs_repeated": repeated},
               "errored_runs": errors}
    json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)


if __name__ == "__main__":
    cmds = {"meta": cmd_meta, "line": cmd_line, "summary": cmd_summary}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](sys.argv[2:])
