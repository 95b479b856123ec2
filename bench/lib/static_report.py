#!/usr/bin/env python3
"""Tables and results.json for bench/static.sh.

Usage: static_report.py RUN_DIR

Reads RUN_DIR/meta.tsv, RUN_DIR/runs.jsonl (written by bench/static.sh), the
raw wrk and strace outputs they name and RUN_DIR/skipped.txt; prints the
tables on stdout and writes RUN_DIR/results.json. Standard library only.
"""
import json
import re
import sys
from pathlib import Path

import wrk

PEERS = ["nginx", "lighttpd", "h2o"]
TERNS = ["tern-default", "tern-sendfile", "tern-mmap", "tern-read"]
ORDER = PEERS + ["minimal"] + TERNS
SIZE_LABEL = {"1k": "1 KiB", "40k": "40 KiB", "1m": "1 MiB"}
SIZE_ORDER = ["1k", "40k", "1m"]

def parse_strace(path):
    """(total calls, {syscall: calls}) from an `strace -c` summary."""
    per, total = {}, None
    for line in Path(path).read_text(errors="replace").splitlines():
        tok = line.split()
        if len(tok) < 5 or not re.fullmatch(r"[\d.]+", tok[0]):
            continue
        try:
            calls = int(tok[3])
        except ValueError:
            continue
        if tok[-1] == "total":
            total = calls
        else:
            per[tok[-1]] = calls
    return total, per


def read_meta(run_dir):
    meta = {}
    for line in (run_dir / "meta.tsv").read_text().splitlines():
        if "\t" in line:
            k, v = line.split("\t", 1)
            meta[k] = v
    return meta


def fmt_int(x):
    return "-" if x is None else f"{x:,.0f}"


def fmt_k(x):
    return "-" if x is None else f"{x / 1000:.1f}k"


def fmt_f(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def fmt_lat(us):
    if us is None:
        return "-"
    return f"{us:.0f} us" if us < 1000 else f"{us / 1000:.2f} ms"


def ratio(a, b):
    return a / b if a and b else None


def table(headers, rows, align=None):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    align = align or ["<"] + [">"] * (len(headers) - 1)
    fmt = "  ".join(f"{{:{a}{w}}}" for a, w in zip(align, widths))
    lines = [fmt.format(*headers), "  ".join("-" * w for w in widths)]
    lines += [fmt.format(*[str(c) for c in r]) for r in rows]
    return "\n".join(lines)


def main():
    run_dir = Path(sys.argv[1])
    meta = read_meta(run_dir)
    clk = int(meta.get("clk_tck", "100"))
    ncpu = int(meta.get("nproc", "1"))
    records = [json.loads(l) for l in (run_dir / "runs.jsonl").read_text().splitlines() if l.strip()]
    skipped = [l for l in (run_dir / "skipped.txt").read_text().splitlines() if l.strip()] \
        if (run_dir / "skipped.txt").exists() else []

    # ---- load runs: every repetition, then the median one per server and size
    runs = []
    for r in (r for r in records if r["kind"] == "load"):
        w = wrk.parse(r["wrk_file"])
        cpu_s = r["server_cpu_ticks"] / clk
        wall = r["wall_s"]
        run = dict(r, **w)
        run["server_cpu_s"] = cpu_s
        run["server_cores"] = cpu_s / wall if wall else None
        run["cpu_us_per_req"] = cpu_s * 1e6 / w["requests"] if w["requests"] else None
        run["rps_per_core"] = w["requests"] / cpu_s if w["requests"] and cpu_s > 0 else None
        # CPU used by every other process on the machine during the run (the
        # load generator's own time comes from the shell's child rusage).
        others = r["system_busy_ticks"] / clk - cpu_s - r["client_cpu_ms"] / 1000
        run["others_cores"] = max(others, 0.0) / wall if wall else None
        run["client_cores"] = r["client_cpu_ms"] / 1000 / wall if wall else None
        run["gib_per_s"] = w["transfer_bytes_per_s"] / (1 << 30) if w["transfer_bytes_per_s"] else None
        run["errors"] = wrk.errors(w)
        runs.append(run)

    summary = {}  # size -> server -> median run (+ spread)
    for size in SIZE_ORDER:
        for server in ORDER:
            reps = [r for r in runs if r["size"] == size and r["server"] == server and r["rps"]]
            if not reps:
                continue
            reps.sort(key=lambda r: r["rps"])
            med = dict(reps[(len(reps) - 1) // 2])
            med["reps_rps"] = [r["rps"] for r in sorted(reps, key=lambda r: r["rep"])]
            summary.setdefault(size, {})[server] = med

    # ---- syscalls and memory
    sysc = {}
    for r in (r for r in records if r["kind"] == "strace"):
        total, per = parse_strace(r["strace_file"])
        idle_total, _ = parse_strace(r["idle_strace_file"])
        idle_rate = idle_total / r["idle_traced_s"] if idle_total is not None and r["idle_traced_s"] else 0.0
        w = wrk.parse(r["wrk_file"])
        reqs = w["requests"]
        ok = total is not None and bool(reqs)
        sysc[r["server"]] = {
            "requests": reqs, "total_calls": total, "traced_s": r["traced_s"],
            "idle_calls": idle_total, "idle_calls_per_s": idle_rate,
            "raw_calls_per_request": total / reqs if ok else None,
            "calls_per_request": max(total - idle_rate * r["traced_s"], 0) / reqs if ok else None,
            "per_syscall_per_request": {k: v / reqs for k, v in sorted(per.items(), key=lambda kv: -kv[1])}
            if ok else {},
            "method": r["method"],
        }
    mem = {r["server"]: r for r in records if r["kind"] == "rss"}
    # What the default config (static.io = "auto") decided, per size class.
    io_file = run_dir / "tern-default-load" / "io.json"
    io_decision = json.loads(io_file.read_text()) if io_file.exists() else None

    # ---- print
    out = []
    p = out.append
    p("Static files: tern vs nginx, lighttpd, h2o and a minimal C epoll responder (bench/static.sh)")
    p(f"date {meta.get('date')}  commit {meta.get('git_commit')}  command: {meta.get('command')}")
    p(f"machine: {meta.get('nproc')} CPUs ({meta.get('cpu_model')}), kernel {meta.get('kernel')}, "
      f"{meta.get('mem_total')}")
    p(f"peers: {meta.get('nginx')}; {meta.get('lighttpd')}; {meta.get('h2o')}")
    p(f"load: {meta.get('wrk')}, -t{meta.get('threads')} -c{meta.get('connections')} "
      f"-d{meta.get('duration_s')}s --latency, keep-alive, {meta.get('reps')} reps (median by req/s shown), "
      f"{meta.get('warmup_s')} s warm-up per size; {meta.get('workers')} workers per server; "
      f"pinning: {meta.get('pinning')}; order: {meta.get('order')}")
    p(f"load average at start {meta.get('loadavg_start')}, at end {meta.get('loadavg_end')}; "
      f"run took {meta.get('elapsed_s')} s")
    p("columns: CPU us/req and req/s/core from the server's own utime+stime (whole process tree); "
      "srv cores = server CPU s / wall s; others = CPU cores used by every other process on the "
      "machine meanwhile (noise); GiB/s = wrk Transfer/sec.")
    if io_decision:
        p("tern-default (static.io = \"auto\") decided: " + io_decision.get("source", "?")
          + (f" ({io_decision['detail']})" if io_decision.get("detail") else "") + "; "
          + "; ".join(f"{c['class']} {c['method']} [{c['basis']}"
                      + ("".join(f" {m} {v:.0f}/s" for m, v in (c.get("responses_per_s") or {}).items()))
                      + "]" for c in io_decision.get("classes", [])))
    present = {s for sz in summary.values() for s in sz}
    tern_present = [t for t in TERNS if t in present]

    for size in SIZE_ORDER:
        if size not in summary:
            continue
        rows = []
        for server in ORDER:
            r = summary[size].get(server)
            if not r:
                continue
            reps = r["reps_rps"]
            rows.append([server, fmt_int(r["rps"]), f"{fmt_k(min(reps))}-{fmt_k(max(reps))}",
                         fmt_lat(r["p99_us"]), fmt_f(r["cpu_us_per_req"], 1), fmt_int(r["rps_per_core"]),
                         fmt_f(r["server_cores"]), fmt_f(r["gib_per_s"], 3), fmt_f(r["others_cores"]),
                         r["errors"]])
        p("")
        p(f"== {SIZE_LABEL[size]} ({summary[size][next(iter(summary[size]))]['bytes']} B) ==")
        p(table(["server", "req/s", "reps range", "p99", "CPU us/req", "req/s/core", "srv cores",
                 "GiB/s", "others", "errors"], rows))
        if tern_present and not any(s in summary[size] for s in PEERS + ["minimal"]):
            p("tern / peer ratios: no peer measured at this size in this run")
        elif tern_present:
            peers = [s for s in PEERS + ["minimal"] if s in summary[size]]
            real_peers = [s for s in PEERS if s in summary[size]]
            best_rps = max(real_peers, key=lambda s: summary[size][s]["rps"]) if real_peers else None
            best_core = max(real_peers, key=lambda s: summary[size][s]["rps_per_core"] or 0) if real_peers else None
            cols = peers + (["best peer"] if real_peers else [])
            rrows = []
            for t in tern_present:
                tr = summary[size].get(t)
                row = [t]
                for c in cols:
                    if tr is None:
                        row.append("-")
                        continue
                    pr = summary[size][best_rps if c == "best peer" else c]
                    pc = summary[size][best_core if c == "best peer" else c]
                    row.append(f"{fmt_f(ratio(tr['rps'], pr['rps']))} / "
                               f"{fmt_f(ratio(tr['rps_per_core'], pc['rps_per_core']))}")
                rrows.append(row)
            p("")
            p("tern / peer (req/s ratio / req/s-per-core ratio)"
              + (f"; best peer by req/s: {best_rps}, by req/s per core: {best_core}" if real_peers else ""))
            p(table(["method"] + cols, rrows))
        else:
            p("tern / peer ratios: PENDING (no tern rows in this run)")

    if sysc or mem:
        p("")
        p("== System calls per keep-alive request (1 KiB, one connection) and memory ==")
        p("syscalls: " + next(iter(sysc.values()))["method"] if sysc else "syscalls: not measured")
        rows = []
        for server in ORDER:
            s, m = sysc.get(server), mem.get(server)
            if not s and not m:
                continue
            top = ", ".join(f"{k} {v:.2f}" for k, v in list(s["per_syscall_per_request"].items())[:4]) if s else "-"
            growth = (m["conns_rss_kib"] - m["idle_rss_kib"]) / 1024 if m else None
            rows.append([server, fmt_f(s["calls_per_request"]) if s else "-",
                         fmt_f(s["raw_calls_per_request"]) if s else "-",
                         fmt_f(s["idle_calls_per_s"], 1) if s else "-",
                         fmt_int(s["requests"]) if s else "-", top,
                         fmt_f(m["idle_rss_kib"] / 1024, 1) if m else "-",
                         fmt_f(m["idle_pss_kib"] / 1024, 1) if m else "-",
                         fmt_f(m["conns_rss_kib"] / 1024, 1) if m else "-",
                         fmt_f(growth, 1),
                         f"{m['conns_still_open']}/{m['conns_wanted']}" if m else "-"])
        conns = next(iter(mem.values()))["conns_wanted"] if mem else 0
        p(table(["server", "syscalls/req", "raw", "idle/s", "requests", "top calls per request (raw)",
                 "idle RSS MiB", "idle PSS MiB", f"RSS {conns} conns", "growth MiB", "still open"], rows,
                ["<", ">", ">", ">", ">", "<", ">", ">", ">", ">", ">"]))
        p("syscalls/req = (calls - idle/s x seconds traced) / requests; raw = calls / requests; "
          "idle/s = the server's calls per second with no traffic. RSS = sum of VmRSS over the "
          "server's processes, PSS = sum of Pss; idle = after start and one request per file.")

    # ---- targets of issue 2
    targets = []

    def target(name, value, limit, ok):
        targets.append({"target": name, "value": value, "limit": limit,
                        "status": "pending" if value is None else ("PASS" if ok else "FAIL")})

    for size in SIZE_ORDER:
        if size not in summary:
            continue
        sz = summary[size]
        peer_best = max((sz[s]["rps"] for s in PEERS if s in sz), default=None)
        tern_best = max((sz[t]["rps"] for t in TERNS if t in sz), default=None)
        v = ratio(tern_best, peer_best)
        target(f"{SIZE_LABEL[size]}: tern best method req/s / best peer req/s", v, ">= 1.0",
               v is not None and v >= 1.0)
        default = sz.get("tern-default", {}).get("rps")
        v = ratio(default, peer_best)
        limit = 1.15 if size == "1m" else 1.0
        target(f"{SIZE_LABEL[size]}: tern-default req/s / best peer req/s (issue 12)", v, f">= {limit}",
               v is not None and v >= limit)
    if "1k" in summary and "minimal" in summary["1k"]:
        sz = summary["1k"]
        tern_best = max((sz[t]["rps_per_core"] or 0 for t in TERNS if t in sz), default=None)
        v = ratio(tern_best, sz["minimal"]["rps_per_core"])
        target("1 KiB: tern best req/s per core / minimal responder's", v, ">= 0.9", v is not None and v >= 0.9)
    for t in TERNS:
        s = sysc.get(t, {}).get("calls_per_request")
        # Rounded to 0.01: the connection's own accept/setsockopt/close, spread
        # over thousands of requests, add about 0.001.
        target(f"{t}: syscalls per keep-alive request", s, "<= 3", s is not None and round(s, 2) <= 3)
        m = mem.get(t)
        v = m["idle_rss_kib"] / 1024 if m else None
        target(f"{t}: idle RSS MiB", v, "< 15", v is not None and v < 15)
        v = (m["conns_rss_kib"] - m["idle_rss_kib"]) / 1024 if m else None
        target(f"{t}: RSS growth MiB with {meta.get('idle_conns')} idle conns", v, "< 64",
               v is not None and v < 64)
    p("")
    p("== Targets (issues 2 and 12) ==")
    p(table(["target", "value", "limit", "status"],
            [[t["target"], fmt_f(t["value"]), t["limit"], t["status"]] for t in targets],
            ["<", ">", "<", "<"]))
    if not tern_present:
        p("")
        p("!!! tern was NOT measured in this run: every tern row and target is PENDING.")
    if skipped:
        p("")
        p("skipped: " + "; ".join(skipped))
    warn = [f"{r['server']} {r['size']} rep {r['rep']}: {r['errors']} errors"
            for r in runs if r["errors"]] + \
           [f"{r['server']} {r['size']} rep {r['rep']}: {'; '.join(r['problems'])}" for r in runs if r["problems"]]
    if warn:
        p("")
        p("wrk reported problems: " + "; ".join(warn))
    print("\n".join(out))

    results = {"meta": meta, "runs": runs, "median": summary, "syscalls": sysc, "memory": mem,
               "targets": targets, "skipped": skipped, "tern_default_io": io_decision}
    (run_dir / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
