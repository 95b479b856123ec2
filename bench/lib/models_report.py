#!/usr/bin/env python3
"""Tables for bench/models.sh (experiment E3): per CPU count, each model at
each CGI share with its probed capacity, every open-loop step (rate asked,
throughput, p99 response time, failed requests), its saturation point, and
the service records summarised; then which model wins where.

Usage: models_report.py OUT_DIR [--slo-ms MS]
"""

import argparse
import csv
import json
import os
import statistics
import sys
from collections import defaultdict

STAGES = ["read", "handle", "send", "log"]


def load_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def step_figures(run):
    """(throughput, p99 ms, failed) of one open-loop step, or None."""
    try:
        with open(run["file"]) as f:
            r = json.load(f)
    except (OSError, ValueError):
        return None
    lat = r["latency"].get("response") or r["latency"]["service"]
    failed = sum(r["errors"].values())
    return r["requests_per_s"], lat["p99_us"] / 1000.0, failed


def carried(run, fig, slo_ms):
    thr, p99, failed = fig
    return thr >= 0.95 * run["rate"] and p99 <= slo_ms and failed == 0


def quantile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def records_summary(path):
    """Service time and start-behind-accept spreads, stage means (staged)."""
    service, behind = [], []
    stages = defaultdict(list)
    try:
        with open(path) as f:
            for row in csv.DictReader(f):
                start, end, accept = int(row["start_us"]), int(row["end_us"]), int(row["accept_us"])
                service.append(end - start)
                behind.append(start - accept)
                for s in STAGES:
                    for part in ("queued", "working"):
                        v = row.get(f"{s}_{part}_us")
                        if v:
                            stages[f"{s}_{part}"].append(int(v))
    except OSError:
        return None
    if not service:
        return None
    out = {
        "rows": len(service),
        "service_p50_ms": quantile(service, 0.5) / 1000,
        "service_p99_ms": quantile(service, 0.99) / 1000,
        "start_behind_accept_p99_ms": quantile(behind, 0.99) / 1000,
    }
    if stages:
        out["stage_mean_us"] = {k: round(statistics.mean(v)) for k, v in stages.items()}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--slo-ms", type=float, default=500)
    args = ap.parse_args()
    runs = load_jsonl(os.path.join(args.out, "runs.jsonl"))
    records = {}
    rec_path = os.path.join(args.out, "records.jsonl")
    if os.path.exists(rec_path):
        for r in load_jsonl(rec_path):
            records[(r["cpus"], r["share"], r["model"])] = records_summary(r["records"])
    by = defaultdict(list)
    for run in runs:
        by[(run["cpus"], run["share"], run["model"])].append(run)
    results = []
    for cpus in sorted({k[0] for k in by}):
        where = "server on CPU 0, tern bench on CPU 1" if cpus == 1 else "server on CPUs 0-1, tern bench beside it"
        print(f"\n## {cpus} CPU{'s' if cpus > 1 else ''} ({where})\n")
        print("| CGI % | model | capacity (closed) | steps: rate → throughput / p99 ms [failed] | saturation req/s "
              "| service p50/p99 ms | start−accept p99 ms |")
        print("|---|---|---|---|---|---|---|")
        best = {}
        for share in sorted({k[1] for k in by if k[0] == cpus}):
            for model in sorted({k[2] for k in by if k[:2] == (cpus, share)}):
                steps = sorted(by[(cpus, share, model)], key=lambda r: r["rate"])
                cells, saturation, load = [], 0, []
                for run in steps:
                    fig = step_figures(run)
                    load.append(run["loadavg_before"])
                    if fig is None:
                        cells.append(f"{run['rate']} → (no report)")
                        continue
                    thr, p99, failed = fig
                    mark = "" if carried(run, fig, args.slo_ms) else "✗"
                    cells.append(f"{run['rate']} → {thr:.0f} / {p99:.1f}{f' [{failed}]' if failed else ''}{mark}")
                    if mark == "":
                        saturation = max(saturation, thr)
                rec = records.get((cpus, share, model))
                svc = f"{rec['service_p50_ms']:.2f} / {rec['service_p99_ms']:.2f}" if rec else "-"
                spread = f"{rec['start_behind_accept_p99_ms']:.1f}" if rec else "-"
                print(f"| {share} | {model} | {steps[0]['capacity']} | {'; '.join(cells)} | {saturation:.0f} | {svc} "
                      f"| {spread} |")
                if rec and rec.get("stage_mean_us"):
                    means = ", ".join(f"{k} {v}" for k, v in sorted(rec["stage_mean_us"].items()))
                    print(f"| | ↳ staged, mean µs per request | | {means} | | | |")
                results.append({"cpus": cpus, "share": share, "model": model, "capacity": steps[0]["capacity"],
                                "saturation": saturation, "records": rec,
                                "loadavg_before_max": max(load) if load else None})
                if saturation > best.get(share, ("", -1))[1]:
                    best[share] = (model, saturation)
        wins = "; ".join(f"CGI {s}%: {m} ({v:.0f} req/s)" for s, (m, v) in sorted(best.items()))
        print(f"\nHighest saturation point per share: {wins}.")
        loads = [r["loadavg_before"] for r in runs if r["cpus"] == cpus]
        if loads:
            print(f"Load average before the steps: {min(loads):.2f} to {max(loads):.2f}"
                  f"{' (under outside load)' if max(loads) > 1.5 else ''}.")
    print(f"\n✗: not carried (throughput < 95 % of the rate, p99 > {args.slo_ms:g} ms, or failed requests).")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
