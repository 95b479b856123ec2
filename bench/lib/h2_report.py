#!/usr/bin/env python3
"""Tables of bench/h2.sh, in markdown, from its runs.tsv.

Usage: h2_report.py RUNS_TSV CLOCK_TICKS_PER_S

Every figure is the median over a cell's runs of the per-run value: the
requests/s the client reported, the server's CPU per response (its ticks
over the run / the responses) and the client's CPU per request.
"""

import csv
import statistics
import sys
from collections import defaultdict

SERVERS = ("nginx", "h2o", "tern")
CLIENTS = (("h2load", "h2load"), ("tern-bench", "tern bench --h2"))
PROTOCOLS = {"h1": "HTTP/1.1", "h2": "HTTP/2"}


def main():
    runs_path, hz = sys.argv[1], float(sys.argv[2])
    cells = defaultdict(list)
    failing = []
    for r in csv.DictReader(open(runs_path), delimiter="\t"):
        ok = int(r["responses"])
        if int(r["errors"]) or not ok:
            failing.append(r)
        key = (r["part"], r["mode"], r["case"], r["shape"], r["server"], r["client"])
        cells[key].append(
            {
                "rps": float(r["rps"]),
                "p99_ms": int(r["p99_us"]) / 1000,
                "server_us": int(r["server_ticks"]) / hz * 1e6 / ok if ok else None,
                "client_us": int(r["client_ms"]) * 1e3 / ok if ok else None,
            }
        )

    def med(key, what):
        values = [run[what] for run in cells.get(key, []) if run[what] is not None]
        return statistics.median(values) if values else None

    files = sorted({k[1:4] for k in cells if k[0] == "files"}, key=order)
    if files:
        print("\n## HTTP/2 over TLS: tern, nginx and h2o (requests/s; server CPU µs per response)\n")
        print("| mode | file | shape | client | nginx | h2o | tern | tern ÷ nginx | tern ÷ h2o | CPU nginx | CPU h2o | CPU tern |")
        print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for mode, case, shape in files:
            for client, label in CLIENTS:
                rps = {s: med(("files", mode, case, shape, s, client), "rps") for s in SERVERS}
                cpu = {s: med(("files", mode, case, shape, s, client), "server_us") for s in SERVERS}
                print(
                    f"| {mode} | {case} | {shape_text(shape)} | {label} | "
                    + " | ".join(num(rps[s]) for s in SERVERS)
                    + f" | {ratio(rps['tern'], rps['nginx'])} | {ratio(rps['tern'], rps['h2o'])} | "
                    + " | ".join(num(cpu[s], 1) for s in SERVERS)
                    + " |"
                )
        print("\n## The clients: `tern bench --h2` against h2load (requests/s; client CPU µs per request)\n")
        print("| mode | file | shape | server | h2load | tern bench | tern bench ÷ h2load | CPU h2load | CPU tern bench |")
        print("|---|---|---|---|---:|---:|---:|---:|---:|")
        for mode, case, shape in files:
            for s in SERVERS:
                h = ("files", mode, case, shape, s, "h2load")
                t = ("files", mode, case, shape, s, "tern-bench")
                if h not in cells and t not in cells:
                    continue
                print(
                    f"| {mode} | {case} | {shape_text(shape)} | {s} | {num(med(h, 'rps'))} | {num(med(t, 'rps'))} | "
                    f"{ratio(med(t, 'rps'), med(h, 'rps'))} | {num(med(h, 'client_us'), 2)} | {num(med(t, 'client_us'), 2)} |"
                )

    mixes = sorted({k[1:4] for k in cells if k[0] == "mix"}, key=order)
    if mixes:
        print("\n## HTTP/1.1 against HTTP/2: the demo site's mix (site/demo.mix), tern over TLS\n")
        print("| mode | protocol | connections × streams | requests/s | p99 ms | server CPU µs per response |")
        print("|---|---|---|---:|---:|---:|")
        best = {}
        for mode, proto, shape in mixes:
            key = ("mix", mode, proto, shape, "tern", "tern-bench")
            rps = med(key, "rps")
            print(f"| {mode} | {PROTOCOLS[proto]} | {shape_text(shape)} | {num(rps)} | {num(med(key, 'p99_ms'), 2)} | {num(med(key, 'server_us'), 1)} |")
            best.setdefault(mode, []).append((rps or 0, f"{PROTOCOLS[proto]} {shape_text(shape)}"))
        print()
        for mode, rows in best.items():
            rows.sort(reverse=True)
            if len(rows) > 1 and rows[1][0]:
                print(f"- {mode}: {rows[0][1]} wins, {rows[0][0] / rows[1][0]:.2f}× the next ({rows[1][1]})")

    if failing:
        print("\n**Runs with failed requests** (errors: failed, reset, timed out; the figures above include them):\n")
        for r in failing:
            print(f"- {r['part']} {r['mode']} {r['case']} {shape_text(r['shape'])} {r['server']} {r['client']} "
                  f"run {int(r['rep']) + 1}: {r['errors']} errors, {r['responses']} responses")


def order(key):
    """Modes and cases in the order the script runs them."""
    mode, case, shape = key
    return ({"unpinned": 0, "pinned": 1}.get(mode, 2), case, -int(shape.split("x")[0]), shape)


def shape_text(shape):
    conns, streams = shape.split("x")
    return f"-c{conns} -m{streams}"


def num(x, digits=0):
    return "-" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


if __name__ == "__main__":
    main()
