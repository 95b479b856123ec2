#!/usr/bin/env python3
"""Report of bench/cgi.sh.

    cgi_report.py OUTDIR            tables on stdout, OUTDIR/results.json
    cgi_report.py --profile DIR     summary of the profiling runs in DIR

OUTDIR holds meta.tsv (tab-separated key/value) and runs.jsonl (one line per
measured wrk run, with the server's CPU ticks around it); the wrk output files
it names are parsed here.
"""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import wrk  # noqa: E402  (bench/lib)

TARGET = ("tern", "lighttpd", 1.2)  # tern >= 1.2x lighttpd (issue 4)
ORDER = ["tern", "lighttpd", "nginx-fcgiwrap"]


def read_meta(outdir):
    meta = {}
    with open(os.path.join(outdir, "meta.tsv"), encoding="utf-8") as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("\t")
            meta[k] = v
    return meta


def parse_wrk(path):
    """wrk's numbers, with latencies in ms as this report prints them."""
    w = wrk.parse(path)
    ms = {k: (w[f"{k}_us"] / 1e3 if w[f"{k}_us"] is not None else None) for k in ("p50", "p99")}
    return {"rps": w["rps"], "requests": w["requests"], "p50_ms": ms["p50"], "p99_ms": ms["p99"],
            "non2xx": w["non_2xx_3xx"], "socket_errors": w["socket_errors"], "problems": w["problems"]}


def fmt_int(x):
    return "-" if x is None else f"{x:,.0f}"


def fmt_ms(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f} ms"


def report(outdir):
    meta = read_meta(outdir)
    clk = int(meta.get("clk_tck", "100"))
    nproc = int(meta.get("nproc", "1"))
    runs = []
    with open(os.path.join(outdir, "runs.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                runs.append(json.loads(line))
    for run in runs:
        run.update(parse_wrk(run["wrk_file"]))
        n = run["requests"] or 0
        ms = 1000.0 / clk
        proc_ticks = run["server_ticks"] + run["cgi_ticks"]
        run["proc_ms_per_req"] = proc_ticks * ms / n if n else None
        run["server_ms_per_req"] = run["server_ticks"] * ms / n if n else None
        cg = run.get("cgroup_us")
        run["cgroup_ms_per_req"] = cg / 1000.0 / n if n and cg is not None else None
        # The figure: the cgroup's count when there is one (it sees every
        # program, reaped or not), else /proc.
        if run["cgroup_ms_per_req"] is not None:
            run["cpu_source"] = "cgroup"
            run["cpu_ms_per_req"] = run["cgroup_ms_per_req"]
            used_s = cg / 1e6
        else:
            run["cpu_source"] = "proc"
            run["cpu_ms_per_req"] = run["proc_ms_per_req"]
            used_s = proc_ticks / clk
        if run["cpu_ms_per_req"] is not None and run["server_ms_per_req"] is not None:
            run["cgi_ms_per_req"] = run["cpu_ms_per_req"] - run["server_ms_per_req"]
        else:
            run["cgi_ms_per_req"] = None
        # What the rest of the machine used: all busy CPU minus the server,
        # its programs and wrk, as a share of all CPUs over the run.
        others = run["system_busy_ticks"] / clk - used_s - run["wrk_cpu_s"]
        run["others_cpu_pct"] = max(0.0, 100.0 * others / (run["wall_s"] * nproc)) if run["wall_s"] else None
        run["errors"] = run["non2xx"] + sum(run["socket_errors"].values())

    names = [s for s in ORDER if any(r["server"] == s for r in runs)]
    servers = {}
    for name in names:
        rs = sorted((r for r in runs if r["server"] == name and r["rps"] is not None), key=lambda r: r["rps"])
        if not rs:
            continue
        med = rs[(len(rs) - 1) // 2]  # the median run (lower middle for an even count)

        def median_of(key, rs=rs):
            vals = [r[key] for r in rs if r[key] is not None]
            return statistics.median(vals) if vals else None

        servers[name] = {
            "rps": med["rps"],
            "p99_ms": med["p99_ms"],
            "p50_ms": med["p50_ms"],
            "median_rep": med["rep"],
            "rps_min": rs[0]["rps"],
            "rps_max": rs[-1]["rps"],
            "cpu_ms_per_req": median_of("cpu_ms_per_req"),
            "cpu_source": rs[0]["cpu_source"],
            "server_ms_per_req": median_of("server_ms_per_req"),
            "cgi_ms_per_req": median_of("cgi_ms_per_req"),
            "proc_ms_per_req": median_of("proc_ms_per_req"),
            "others_cpu_pct": median_of("others_cpu_pct"),
            "errors": sum(r["errors"] for r in rs),
            "problems": [p for r in rs for p in r["problems"]],
            "runs": len(rs),
        }

    ratios = {}
    tern = servers.get("tern")
    for peer in names:
        if peer == "tern" or peer not in servers or not tern:
            continue
        p = servers[peer]
        ratios[f"tern/{peer}"] = {
            "rps": tern["rps"] / p["rps"] if p["rps"] else None,
            "cpu_per_req": (tern["cpu_ms_per_req"] / p["cpu_ms_per_req"]
                            if tern["cpu_ms_per_req"] and p["cpu_ms_per_req"] else None),
        }
    a, b, want = TARGET
    target = {"what": f"{a} >= {want}x {b} (requests/s)", "ratio": None, "met": None}
    if a in servers and b in servers:
        target["ratio"] = servers[a]["rps"] / servers[b]["rps"]
        target["met"] = target["ratio"] >= want

    # ---- text
    out = []
    out.append(f"CGI benchmark: {meta.get('program', '')}")
    out.append(f"  wrk -t{meta.get('threads')} -c{meta.get('connections')} -d{meta.get('duration_s')}s --latency, "
               f"{meta.get('warmup_s')} s warm-up before each run, {meta.get('reps')} rounds (server order rotated), "
               f"{meta.get('workers')} workers per server, fcgiwrap -c {meta.get('fcgiwrap_children')}, "
               f"pinning: {meta.get('pinning')}")
    if meta.get("quiet_gate"):
        out.append(f"  quiet gate: {meta['quiet_gate']}")
    out.append(f"  {meta.get('date')}  nproc {meta.get('nproc')}  kernel {meta.get('kernel')}  "
               f"load average {meta.get('loadavg_start')} -> {meta.get('loadavg_end', '?')}")
    out.append(f"  {meta.get('lighttpd')}; {meta.get('nginx')}; {meta.get('fcgiwrap')}; {meta.get('wrk')}; "
               f"tern {meta.get('git_commit')}")
    out.append("")
    sources = {s["cpu_source"] for s in servers.values()}
    out.append("Median run per server (requests/s and p99 of that run; min-max over runs). CPU per request, "
               "median over runs:")
    if sources == {"cgroup"}:
        out.append("  CPU/req = everything that ran in the server's CPU-accounting cgroup (its processes and every "
                   "program they started);")
    else:
        out.append("  CPU/req = " + ", ".join(f"{n}: {s['cpu_source']}" for n, s in servers.items()) +
                   " (cgroup: the server's CPU-accounting cgroup; proc: /proc utime+stime+cutime+cstime);")
    out.append("  server = utime+stime of the server's own processes (/proc); CGI = CPU/req - server;")
    out.append("  /proc = server + cutime+cstime of the programs they reaped (blind to programs nobody "
               "waits for: fcgiwrap ignores SIGCHLD)")
    hdr = (f"{'server':<16} {'req/s':>8} {'min-max':>13} {'p99':>10} {'CPU/req':>9} "
           f"{'server':>8} {'CGI':>8} {'/proc':>8} {'others':>7} {'errors':>6}")
    out.append(hdr)
    for name in names:
        s = servers.get(name)
        if not s:
            out.append(f"{name:<16} (no successful run)")
            continue
        cgi = s["cgi_ms_per_req"]
        if name == "nginx-fcgiwrap" and s["cpu_source"] != "cgroup":
            cgi = None
        out.append(f"{name:<16} {fmt_int(s['rps']):>8} {fmt_int(s['rps_min']) + '-' + fmt_int(s['rps_max']):>13} "
                   f"{fmt_ms(s['p99_ms']):>10} {fmt_ms(s['cpu_ms_per_req'], 2):>9} "
                   f"{fmt_ms(s['server_ms_per_req'], 2):>8} {fmt_ms(cgi, 2):>8} "
                   f"{fmt_ms(s['proc_ms_per_req'], 2):>8} "
                   f"{s['others_cpu_pct']:>6.0f}% {s['errors']:>6}")
    out.append("  (others: CPU the rest of the machine used during the runs, excluding the server, its "
               "programs and wrk, as a share of all CPUs)")
    out.append("")
    for k, v in ratios.items():
        rps = "-" if v["rps"] is None else f"{v['rps']:.2f}x"
        cpu = "-" if v["cpu_per_req"] is None else f"{v['cpu_per_req']:.2f}x"
        out.append(f"{k:<24} requests/s {rps:>7}   CPU per request {cpu:>7}")
    if target["ratio"] is not None:
        out.append(f"target {target['what']}: {target['ratio']:.2f}x -> {'MET' if target['met'] else 'NOT MET'}")
    out.append("")
    out.append("Every run")
    out.append(f"{'round':>5} {'pos':>3} {'server':<16} {'req/s':>8} {'p99':>10} {'CPU/req':>9} "
               f"{'others':>7} {'load':>5} {'errors':>6}")
    for r in sorted(runs, key=lambda r: (r["rep"], r["position"])):
        out.append(f"{r['rep']:>5} {r['position']:>3} {r['server']:<16} {fmt_int(r['rps']):>8} "
                   f"{fmt_ms(r['p99_ms']):>10} {fmt_ms(r['cpu_ms_per_req'], 2):>9} "
                   f"{(r['others_cpu_pct'] or 0):>6.0f}% {r['loadavg_before']:>5} {r['errors']:>6}")
    problems = [(r["server"], r["rep"], r) for r in runs if r["errors"] or r["problems"]]
    if problems:
        out.append("")
        out.append("wrk errors:")
        for name, rep, r in problems:
            out.append(f"  {name} round {rep}: non-2xx {r['non2xx']}, socket errors {r['socket_errors']} "
                       f"{'; '.join(r['problems'])}")
    print("\n".join(out))

    results = {"meta": meta, "servers": servers, "ratios": ratios, "target": target,
               "runs": [{k: v for k, v in r.items()} for r in runs]}
    with open(os.path.join(outdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
        f.write("\n")


def parse_strace(path):
    """{syscall: (calls, errors, seconds)} from strace -c output."""
    calls = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return calls
    for line in lines:
        parts = line.split()
        if len(parts) < 5 or not re.fullmatch(r"[\d.]+", parts[0]) or parts[-1] == "total":
            continue
        # % time, seconds, usecs/call, calls, [errors], syscall
        name = parts[-1]
        if len(parts) == 6:
            errors = int(parts[4])
        else:
            errors = 0
        calls[name] = (int(parts[3]), errors, float(parts[1]))
    return calls


def profile(d):
    out = []
    for mode, what in (("threads", "tern's own threads (strace -c, children not followed)"),
                       ("follow", "tern and every program it started (strace -c -f)")):
        w = parse_wrk(os.path.join(d, f"wrk-strace-{mode}.txt"))
        calls = parse_strace(os.path.join(d, f"strace-{mode}.txt"))
        n = w["requests"]
        if not n or not calls:
            out.append(f"{what}: no data")
            continue
        total = sum(c for c, _, _ in calls.values())
        out.append(f"{what}: {n} requests under strace ({fmt_int(w['rps'])} req/s), "
                   f"{total / n:.1f} system calls per request")
        for name, (c, e, secs) in sorted(calls.items(), key=lambda kv: -kv[1][0])[:20]:
            err = f" ({e / n:.2f} failed)" if e else ""
            out.append(f"    {name:<20} {c / n:7.2f} per request{err}  {secs * 1e6 / n:8.1f} us/request in the call")
    rep = os.path.join(d, "perf-report.txt")
    if os.path.exists(rep):
        out.append("perf record -g --no-inherit (tern's threads only), top symbols by self time:")
        with open(rep, encoding="utf-8", errors="replace") as f:
            rows = [line.rstrip() for line in f if re.match(r"^\s+[\d.]+%", line)]
        out.extend("    " + r.strip() for r in rows[:25])
    floor = os.path.join(d, "cgi_floor.txt")
    if os.path.exists(floor):
        out.append("floor: the program run 1,000 times from a minimal C parent (no HTTP), CPU per run:")
        with open(floor, encoding="utf-8", errors="replace") as f:
            for line in f:
                kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
                if "cpu_ms_per_run" not in kv:
                    out.append("    " + line.strip())
                    continue
                out.append(f"    {kv['method']:<6} {float(kv['cpu_ms_per_run']):.3f} ms "
                           f"(parent {float(kv['parent_ms_per_run']):.3f} + program "
                           f"{float(kv['program_ms_per_run']):.3f}), wall {float(kv['wall_ms_per_run']):.3f} ms, "
                           f"{kv['bytes_per_run']} bytes, {kv['failed']} failed")
    print("\n".join(out))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--profile":
        profile(sys.argv[2])
    elif len(sys.argv) == 2:
        report(sys.argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
