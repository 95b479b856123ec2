#!/usr/bin/env python3
"""Tables for bench/compression.sh: reads OUT/runs.jsonl and the wrk outputs,
prints Markdown (steady load per page with ratios, the cost of a cached
compressed response against identity, the cold burst, the issue's targets)
and writes OUT/results.json.

Usage: compression_report.py OUT_DIR
"""
import json
import os
import re
import statistics
import sys

import wrk

PEERS = ("nginx-gzip6", "nginx-gzip1", "lighttpd-cache")
TERN = ("tern-off", "tern-inline", "tern-adaptive")


def parse_wrk(path):
    """wrk's numbers, with latencies in ms as this report prints them."""
    w = wrk.parse(path)
    ms = {k: (w[f"{k}_us"] / 1e3 if w[f"{k}_us"] is not None else None) for k in ("p50", "p99", "max")}
    return {"requests": w["requests"] or 0, "rps": w["rps"] or 0.0, **ms,
            "errors": sum(w["socket_errors"].values()), "non2xx": w["non_2xx_3xx"]}


def fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def main():
    out = sys.argv[1]
    meta = dict(line.rstrip("\n").split("\t", 1) for line in open(os.path.join(out, "meta.tsv")) if "\t" in line)
    tck = float(meta.get("clk_tck", 100))
    runs = [json.loads(line) for line in open(os.path.join(out, "runs.jsonl"))]

    steady = {}
    for run in (r for r in runs if r["kind"] == "steady"):
        w = parse_wrk(run["wrk_file"])
        w["cpu_us"] = run["server_cpu_ticks"] / tck * 1e6 / w["requests"] if w["requests"] else None
        head, body, enc = run["wire"].split()
        w.update(head=int(head), body=int(body), encoding=enc)
        steady.setdefault((run["server"], run["page"]), []).append(w)
    # The median repetition by requests/s stands for the set.
    median = {}
    for key, reps in steady.items():
        reps.sort(key=lambda r: r["rps"])
        m = reps[len(reps) // 2]
        m["rps_all"] = [r["rps"] for r in reps]
        median[key] = m

    lines = []
    p = lines.append
    p("## Steady load (`%s`, `Accept-Encoding: gzip`)\n" % meta.get("steady", ""))
    pages = sorted({k[1] for k in median})
    servers = [s for s in ("tern-off", "tern-inline", "tern-adaptive", "tern-identity", "nginx-gzip1", "nginx-gzip6",
                           "lighttpd-cache", "lighttpd-nocache") if any((s, pg) in median for pg in pages)]
    for page in pages:
        p(f"### {page:,}-byte page\n")
        peers = [x for x in PEERS if (x, page) in median]
        p("| server | req/s | p99 ms | bytes/response (head + body) | coding | server CPU µs/req | "
          + " | ".join(f"× {x}" for x in peers) + " |")
        p("|---|---:|---:|---:|---|---:|" + "---:|" * len(peers))
        for s in servers:
            r = median.get((s, page))
            if not r:
                continue
            ratios = []
            for x in peers:
                base = median[(x, page)]["rps"]
                ratios.append(f"{r['rps'] / base:.2f}" if base else "-")
            p(f"| {s} | {fmt(r['rps'])} | {fmt(r['p99'], 2)} | {r['head'] + r['body']:,} ({r['head']} + {r['body']:,}) "
              f"| {r['encoding']} | {fmt(r['cpu_us'], 1)} | " + " | ".join(ratios) + " |")
        p("")

    p("## Cost of a cached compressed response against identity (tern-adaptive)\n")
    p("| page | gzip from cache: req/s, CPU µs/req | identity (sendfile): req/s, CPU µs/req | CPU ratio | req/s ratio |")
    p("|---:|---|---|---:|---:|")
    cost = {}
    for page in pages:
        a, i = median.get(("tern-adaptive", page)), median.get(("tern-identity", page))
        if not (a and i and a["cpu_us"] and i["cpu_us"]):
            continue
        cost[page] = {"cpu_ratio": a["cpu_us"] / i["cpu_us"], "rps_ratio": a["rps"] / i["rps"]}
        p(f"| {page:,} | {fmt(a['rps'])}, {fmt(a['cpu_us'], 1)} | {fmt(i['rps'])}, {fmt(i['cpu_us'], 1)} "
          f"| {cost[page]['cpu_ratio']:.2f} | {cost[page]['rps_ratio']:.2f} |")
    p("")

    bursts = {}
    for run in (r for r in runs if r["kind"] == "burst"):
        try:
            b = json.load(open(run["bench_file"]))
        except (OSError, ValueError):
            continue
        lat = b["latency"]["service"]
        w = {"requests": b["requests"], "rps": b["requests_per_s"], "p50": lat["p50_us"] / 1e3,
             "p99": lat["p99_us"] / 1e3, "max": lat["max_us"] / 1e3, "errors": sum(b["errors"].values()),
             "non2xx": 0, "generator_saturated": b["generator"]["saturated"]}
        w["cpu_s"] = run["server_cpu_ticks"] / tck
        if run.get("status_file"):
            try:
                c = json.load(open(run["status_file"]))["compression"]
                w["tern"] = {k: c[k] for k in ("hits", "misses", "deferred", "queue")}
                w["tern"]["compressions"] = c["codings"]["gzip"]["compressions"]
            except (OSError, ValueError, KeyError):
                pass
        bursts[run["server"]] = w
    if bursts:
        p("## Cold burst (`%s`)\n" % meta.get("burst", ""))
        p("| server | requests | req/s | p50 ms | p99 ms | max ms | errors | server CPU s | tern: compressions, deferred, hits, misses |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        saturated = [s for s, w in bursts.items() if w.get("generator_saturated")]
        for s, w in bursts.items():
            t = w.get("tern")
            tern = f"{t['compressions']:,}, {t['deferred']:,}, {t['hits']:,}, {t['misses']:,}" if t else "-"
            p(f"| {s} | {w['requests']:,} | {fmt(w['rps'])} | {fmt(w['p50'], 2)} | {fmt(w['p99'], 2)} | {fmt(w['max'], 2)} "
              f"| {w['errors'] + w['non2xx']} | {w['cpu_s']:.2f} | {tern} |")
        p("")
        if saturated:
            p("The load generator reported itself saturated for: " + ", ".join(saturated) + ".\n")

    p("## Targets\n")
    big = 41518
    targets = {}
    a, lc, n6 = (median.get((s, big)) for s in ("tern-adaptive", "lighttpd-cache", "nginx-gzip6"))
    if a and lc:
        ratio = a["rps"] / lc["rps"]
        targets["rps_vs_lighttpd_cache"] = ratio
        p(f"- tern-adaptive ≥ 1.0× lighttpd-with-cache in req/s on the 41,518-byte page: **{ratio:.2f}×** — "
          + ("met" if ratio >= 1.0 else "NOT met"))
    if a and n6:
        ratio = a["rps"] / n6["rps"]
        targets["rps_vs_nginx_gzip6"] = ratio
        p(f"- against nginx gzip level 6 (the issue expects about 20×): **{ratio:.1f}×**")
    if big in cost:
        c = cost[big]
        targets["cached_cost_vs_identity"] = c["cpu_ratio"]
        p(f"- a cached compressed response costs ≤ 1.1× an identity response (server CPU per request, 41,518 bytes): "
          f"**{c['cpu_ratio']:.2f}×** — " + ("met" if c["cpu_ratio"] <= 1.1 else "NOT met")
          + " (all pages: " + ", ".join("%.2f" % v["cpu_ratio"] for v in cost.values()) + ")")
    ai, ii = bursts.get("tern-adaptive"), bursts.get("tern-inline")
    if ai and ii and ai["p99"] is not None and ii["p99"] is not None:
        met = ai["p99"] < 50 <= ii["p99"]
        targets["burst_p99_adaptive_ms"] = ai["p99"]
        targets["burst_p99_inline_ms"] = ii["p99"]
        p(f"- cold burst: adaptive p99 **{ai['p99']:.1f} ms** < 50 ms where inline is not (**{ii['p99']:.1f} ms**) — "
          + ("met" if met else "NOT met"))
    p("")
    print("\n".join(lines))
    json.dump({"meta": meta, "steady": {f"{k[0]}/{k[1]}": v for k, v in median.items()}, "cost": cost,
               "burst": bursts, "targets": targets}, open(os.path.join(out, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
