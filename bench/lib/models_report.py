#!/usr/bin/env python3
"""Tables for bench/models.sh (experiment E3): per CPU count, each model at
each CGI share with its probed capacity, every open-loop step (rate asked,
throughput, p99 response time, failed requests), its saturation point, and
the service records summarised; then which model wins where.

The records give, per request, its arrival (the readiness that brought its
first bytes), service start and end: the spreads of start - arrival (time
waiting to be served) and end - arrival are summarised at the saturation
step (the highest rate carried), from the requests that arrived during that
step's run.

Usage: models_report.py OUT_DIR [OUT_DIR...] [--slo-ms MS]
(several directories: the parts of one sweep run in separate slots)
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


def spreads(rows):
    """p50/p99 in ms of start - arrival (waiting) and end - arrival."""
    wait = [start - arrive for arrive, start, _ in rows]
    total = [end - arrive for arrive, _, end in rows]
    return {
        "requests": len(rows),
        "wait_p50_ms": quantile(wait, 0.5) / 1000,
        "wait_p99_ms": quantile(wait, 0.99) / 1000,
        "end_p50_ms": quantile(total, 0.5) / 1000,
        "end_p99_ms": quantile(total, 0.99) / 1000,
    }


def records_summary(path, windows):
    """Service time over the whole run, stage means (staged), and the
    waiting and end spreads of the requests that arrived in each window
    (step -> (t0_us, t1_us) on the records' clock)."""
    service, timed = [], []
    stages = defaultdict(list)
    try:
        with open(path) as f:
            reader = csv.reader(f)
            header = next(reader)
            col = {name: i for i, name in enumerate(header)}
            arrive_i, start_i, end_i = col["arrive_us"], col["start_us"], col["end_us"]
            stage_cols = [(f"{s}_{part}", col[f"{s}_{part}_us"]) for s in STAGES for part in ("queued", "working")]
            for row in reader:
                arrive, start, end = int(row[arrive_i]), int(row[start_i]), int(row[end_i])
                service.append(end - start)
                timed.append((arrive, start, end))
                for name, i in stage_cols:
                    if row[i]:
                        stages[name].append(int(row[i]))
    except (OSError, StopIteration, KeyError):
        return None
    if not service:
        return None
    out = {
        "rows": len(service),
        "service_p50_ms": quantile(service, 0.5) / 1000,
        "service_p99_ms": quantile(service, 0.99) / 1000,
        "steps": {},
    }
    for step, (t0, t1) in windows.items():
        inside = [r for r in timed if t0 <= r[0] < t1]
        if inside:
            out["steps"][step] = spreads(inside)
    if stages:
        out["stage_mean_us"] = {k: round(statistics.mean(v)) for k, v in stages.items()}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="+")
    ap.add_argument("--slo-ms", type=float, default=500)
    args = ap.parse_args()
    runs, recs = [], []
    for out in args.out:
        runs += load_jsonl(os.path.join(out, "runs.jsonl"))
        rec_path = os.path.join(out, "records.jsonl")
        if os.path.exists(rec_path):
            recs += load_jsonl(rec_path)
    by = defaultdict(list)
    for run in runs:
        by[(run["cpus"], run["share"], run["model"])].append(run)
    records = {}
    for r in recs:
        key = (r["cpus"], r["share"], r["model"])
        windows = {run["step"]: (run["t0_us"], run["t1_us"]) for run in by[key] if "t0_us" in run}
        records[key] = records_summary(r["records"], windows)
    results = []
    for cpus in sorted({k[0] for k in by}):
        where = "server on CPU 0, tern bench on CPU 1" if cpus == 1 else "server on CPUs 0-1, tern bench beside it"
        print(f"\n## {cpus} CPU{'s' if cpus > 1 else ''} ({where})\n")
        print("| CGI % | model | capacity (closed) | steps: rate → throughput / p99 ms [failed] | saturation req/s "
              "| service p50/p99 ms | at saturation: wait (start−arrival) p50/p99 ms | at saturation: end−arrival "
              "p50/p99 ms |")
        print("|---|---|---|---|---|---|---|---|")
        best = {}
        for share in sorted({k[1] for k in by if k[0] == cpus}):
            for model in sorted({k[2] for k in by if k[:2] == (cpus, share)}):
                steps = sorted(by[(cpus, share, model)], key=lambda r: r["rate"])
                cells, saturation, load, sat_step = [], 0, [], None
                for run in steps:
                    fig = step_figures(run)
                    load.append(run["loadavg_before"])
                    if fig is None:
                        cells.append(f"{run['rate']} → (no report)")
                        continue
                    thr, p99, failed = fig
                    mark = "" if carried(run, fig, args.slo_ms) else "✗"
                    cells.append(f"{run['rate']} → {thr:.0f} / {p99:.1f}{f' [{failed}]' if failed else ''}{mark}")
                    if mark == "" and thr > saturation:
                        saturation, sat_step = thr, run["step"]
                rec = records.get((cpus, share, model))
                svc = f"{rec['service_p50_ms']:.2f} / {rec['service_p99_ms']:.2f}" if rec else "-"
                at = rec["steps"].get(sat_step) if rec else None
                wait = f"{at['wait_p50_ms']:.2f} / {at['wait_p99_ms']:.2f}" if at else "-"
                end = f"{at['end_p50_ms']:.2f} / {at['end_p99_ms']:.2f}" if at else "-"
                print(f"| {share} | {model} | {steps[0]['capacity']} | {'; '.join(cells)} | {saturation:.0f} | {svc} "
                      f"| {wait} | {end} |")
                if rec and rec.get("stage_mean_us"):
                    means = ", ".join(f"{k} {v}" for k, v in sorted(rec["stage_mean_us"].items()))
                    print(f"| | ↳ staged, mean µs per request | | {means} | | | | |")
                results.append({"cpus": cpus, "share": share, "model": model, "capacity": steps[0]["capacity"],
                                "saturation": saturation, "saturation_step": sat_step, "records": rec,
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
    with open(os.path.join(args.out[0], "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
