#!/usr/bin/env python3
"""Tables of bench/cpu_per_response.sh from its run directory (runs.jsonl):
CPU per response at the fixed rates (medians of the rounds, with the run
delay and the latency beside them, and tern's ratios to the cheapest peer
and to tern's event engine), system calls per response, and the saturation
throughput. Usage: cpu_report.py OUT_DIR"""

import json
import re
import statistics
import sys
from pathlib import Path

PEERS = ("nginx", "lighttpd", "h2o")
SIZES = ("1k", "40k", "1m")


def bench(path):
    """responses, req/s, service p50 and p99 (strings), errors of a `tern bench` output."""
    text = Path(path).read_text(errors="replace")
    m = re.search(r"^\s+requests\s+([\d,]+)\s+([\d.]+) req/s", text, re.M)
    lat = re.search(r"^\s+service\s+(\S+)\s+\S+\s+(\S+)", text, re.M)
    err = re.search(r"^\s+errors\s+(.*)$", text, re.M)
    if not m:
        return None
    return {
        "responses": int(m.group(1).replace(",", "")),
        "rate": float(m.group(2)),
        "p50": lat.group(1) if lat else "?",
        "p99": lat.group(2) if lat else "?",
        "errors": err.group(1).strip() if err else "?",
    }


def syscalls(path):
    """Total syscall entries and the five most frequent, from `perf stat`."""
    calls = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        m = re.match(r"\s*([\d,]+)\s+syscalls:sys_enter_(\w+)", line)
        if m:
            calls[m.group(2)] = int(m.group(1).replace(",", ""))
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
    return sum(calls.values()), top


def kind(server):
    return "minimal" if server.startswith("minimal") else server


def main(out):
    out = Path(out)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line.strip()]
    cpu, sat, sys_rows = {}, {}, []
    for r in runs:
        b = bench(r["bench_file"])
        if r["round"] == "syscalls":
            if b and Path(r["perf_file"]).exists():
                total, top = syscalls(r["perf_file"])
                sys_rows.append((kind(r["server"]), r["rate"], total / max(b["responses"], 1), top, b))
            continue
        if not b or b["responses"] == 0:
            continue
        key = (kind(r["server"]), r["size"])
        if r["rate"] > 0:
            cpu.setdefault((key, r["rate"]), []).append(
                (r["run_ns"] / 1000 / b["responses"], r["delay_ns"] / 1000 / b["responses"], b)
            )
        else:
            sat.setdefault(key, []).append(b["rate"])
    meta = dict(line.split("\t", 1) for line in (out / "meta.tsv").read_text().splitlines() if "\t" in line)
    print(f"# CPU per response ({meta.get('date', '?')}, commit {meta.get('git_commit', '?')})\n")
    print(f"load average before: {meta.get('loadavg_start', '?')}; after: {meta.get('loadavg_end', '?')}\n")
    servers = sorted({k[0][0] for k in cpu}, key=lambda s: (s.startswith("minimal"), s not in PEERS, s))
    cases = sorted({(k[0][1], k[1]) for k in cpu}, key=lambda c: SIZES.index(c[0]) if c[0] in SIZES else 9)
    print("CPU µs per response, median of the rounds (all rounds; run delay µs per response; service p50/p99 of the median run):\n")
    print("| server | " + " | ".join(f"{s}, {rate:,}/s" for s, rate in cases) + " |")
    print("|---|" + "---|" * len(cases))
    med = {}
    for srv in servers:
        cells = []
        for size, rate in cases:
            samples = cpu.get(((srv, size), rate))
            if not samples:
                cells.append("—")
                continue
            values = sorted(s[0] for s in samples)
            m = statistics.median(values)
            med[(srv, size)] = m
            mid = min(samples, key=lambda s: abs(s[0] - m))
            cells.append(
                f"**{m:.1f}** ({', '.join(f'{v:.1f}' for v in values)}; delay {statistics.median(s[1] for s in samples):.1f}; "
                f"{mid[2]['p50']}/{mid[2]['p99']})"
            )
        print(f"| {srv} | " + " | ".join(cells) + " |")
    print()
    for tern in [s for s in servers if s.startswith("tern")]:
        ratios = []
        for size, _ in cases:
            peers = [med[(p, size)] for p in PEERS if (p, size) in med]
            if (tern, size) not in med or not peers:
                continue
            cheapest = min(peers)
            line = f"{size}: ÷ cheapest peer {med[(tern, size)] / cheapest:.2f}"
            if ("tern-default", size) in med and tern != "tern-default":
                line += f", ÷ tern event {med[(tern, size)] / med[('tern-default', size)]:.2f}"
            ratios.append(line)
        if ratios:
            print(f"- {tern}: " + "; ".join(ratios))
    if sys_rows:
        print("\nSystem calls per response, 1 KiB, perf stat over every thread of the server (rate 0 = closed loop):\n")
        print("| server | load | calls per response | most frequent (per response) | req/s |")
        print("|---|---|---|---|---|")
        for srv, rate, per, top, b in sys_rows:
            n = max(b["responses"], 1)
            tops = ", ".join(f"{name} {count / n:.2f}" for name, count in top)
            load = f"{rate:,}/s" if rate else "closed loop"
            print(f"| {srv} | {load} | {per:.2f} | {tops} | {b['rate']:,.0f} |")
    if sat:
        print("\nSaturation, closed loop, requests/s, median of the rounds (all rounds):\n")
        print("| server | " + " | ".join(SIZES) + " |")
        print("|---|---|---|---|")
        for srv in servers:
            cells = []
            for size in SIZES:
                v = sorted(sat.get((srv, size), []))
                cells.append(f"**{statistics.median(v):,.0f}** ({', '.join(f'{x:,.0f}' for x in v)})" if v else "—")
            print(f"| {srv} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
