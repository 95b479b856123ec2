#!/usr/bin/env python3
"""soak.py: the parts of bench/soak.sh that are easier in Python.

  soak.py sample --pid PID --out CSV [--metrics URL] [--log FILE] [--stop FILE]
      One row a second until FILE exists: the server's resident and anonymous
      memory, descriptors, threads, child processes and zombies among them
      (its CGI programs are its children; nginx: --workers-are-children),
      and from its metrics page (tern) the compressed cache's bytes, the
      access-log lines it counted lost and its workers' tick ages (the
      watchdog); the access log's line count, read incrementally.
  soak.py hold --port P --conns N --seconds S [--host H]
      Opens N connections as fast as it can, each asking for /1k.bin, holds
      them S seconds, then closes them: the descriptor-limit fault. Prints
      "opened N answered_200 N answered_503 N closed N silent N refused N".
  soak.py corpus --port P --seconds S --dir DIR [--every SECONDS]
      The hostile corpus (../shared/http1-corpus) as a trickle: one vector a
      connection, every SECONDS, for S seconds. Prints "sent N answered N".
  soak.py report --dir OUT --server NAME [--lab-template JSON] ...
      Joins the samples, the load generator's timelines and the fault log
      into the per-second CSV, judges the run, prints the table, writes the
      lab runs (JSON for `tern lab import`). Exit 1 when the judgement fails.
"""
import argparse
import base64
import calendar
import csv
import glob
import json
import math
import os
import re
import selectors
import socket
import sys
import time
import urllib.request

# ---------------------------------------------------------------- sampling


def children(pid):
    """The descendants of PID, as {pid: (ppid, state, comm)}."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(d)] = (int(fields[1]), fields[0], comm)
    tree, queue = {}, [pid]
    kids = {}
    for p, (pp, _, _) in procs.items():
        kids.setdefault(pp, []).append(p)
    while queue:
        p = queue.pop()
        for k in kids.get(p, []):
            tree[k] = procs[k]
            queue.append(k)
    return tree


def status_fields(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "Threads"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


METRIC = re.compile(r"^(tern_[a-z_]+)(\{[^}]*\})? (\d+(?:\.\d+)?)$", re.M)


def metrics(url):
    """{name or name{labels}: value} from a Prometheus page, or None."""
    try:
        with urllib.request.urlopen(url, timeout=0.8) as r:
            text = r.read().decode()
    except Exception:
        return None
    return {m[1] + (m[2] or ""): float(m[3]) for m in METRIC.finditer(text)}


class LineCounter:
    """Counts a growing file's lines, reading only what is new."""

    def __init__(self, path):
        self.path, self.offset, self.lines = path, 0, 0

    def count(self):
        if not self.path:
            return 0
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                while True:
                    chunk = f.read(1 << 20)
                    if not chunk:
                        break
                    self.lines += chunk.count(b"\n")
                    self.offset += len(chunk)
        except OSError:
            pass
        return self.lines


SAMPLE_FIELDS = ["time", "rss_kib", "anon_kib", "fds", "threads", "children", "zombies", "cache_bytes",
                 "lines_lost", "max_tick_age_ms", "log_lines", "status_ok", "zombie_pids"]


def sample(a):
    counter = LineCounter(a.log)
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SAMPLE_FIELDS)
        next_t = time.time()
        while not os.path.exists(a.stop):
            tree = children(a.pid)
            procs = [a.pid] + [p for p, v in tree.items() if v[1] != "Z" and v[0] == a.pid and a.workers_are_children]
            rss = anon = nfd = threads = 0
            for p in procs:
                s = status_fields(p)
                rss += s.get("VmRSS", 0)
                anon += s.get("RssAnon", 0)
                threads += s.get("Threads", 0)
                nfd += fds(p)
            kids = [v for p, v in tree.items() if not (a.workers_are_children and v[0] == a.pid)]
            zombies = [p for p, v in tree.items() if v[1] == "Z"]
            m = metrics(a.metrics) if a.metrics else None
            cache = lost = age = ""
            if m is not None:
                cache = int(sum(v for k, v in m.items() if k.startswith("tern_compression_cache_memory_bytes")))
                lost = int(m.get("tern_access_log_lines_lost_total", 0))
                ages = [v for k, v in m.items() if k.startswith("tern_worker_tick_age_milliseconds")]
                age = int(max(ages)) if ages else ""
            w.writerow([f"{time.time():.3f}", rss, anon, nfd, threads, len(kids), len(zombies), cache, lost, age,
                        counter.count(), int(m is not None) if a.metrics else "", " ".join(map(str, zombies))])
            f.flush()
            next_t += 1
            time.sleep(max(0.0, next_t - time.time()))


# ---------------------------------------------------------------- clients


def hold(a):
    sel = selectors.DefaultSelector()
    req = b"GET /1k.bin HTTP/1.1\r\nHost: soak\r\nUser-Agent: soak-hold\r\n\r\n"
    socks, refused = [], 0
    deadline = time.time() + 5
    for _ in range(a.conns):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect_ex((a.host, a.port))
        except OSError:
            refused += 1
            s.close()
            continue
        socks.append(s)
    # Send once connected (or note the refusal).
    pending = {s: b"" for s in socks}
    for s in socks:
        sel.register(s, selectors.EVENT_WRITE)
    sent = set()
    while len(sent) < len(socks) and time.time() < deadline:
        for key, _ in sel.select(0.2):
            s = key.fileobj
            try:
                s.send(req)
                sent.add(s)
            except OSError:
                refused += 1
                sent.add(s)
            sel.unregister(s)
    for s in socks:
        if s not in sent:
            sel.unregister(s)
        else:
            try:
                sel.register(s, selectors.EVENT_READ)
            except (ValueError, KeyError):
                pass
    end = time.time() + a.seconds
    closed = set()
    while time.time() < end:
        for key, _ in sel.select(0.2):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if data:
                pending[s] += data
            else:
                closed.add(s)
                sel.unregister(s)
    ok = sum(1 for v in pending.values() if v.startswith(b"HTTP/1.1 200"))
    busy = sum(1 for v in pending.values() if v.startswith(b"HTTP/1.1 503"))
    silent = sum(1 for s in socks if not pending[s] and s not in closed)
    for s in socks:
        s.close()
    print(f"opened {len(socks)} answered_200 {ok} answered_503 {busy} closed {len(closed)} silent {silent}"
          f" refused {refused}")


def corpus(a):
    vectors = []
    for path in sorted(glob.glob(os.path.join(a.dir, "*.jsonl"))):
        with open(path) as f:
            vectors += [base64.b64decode(v["raw_b64"]) for v in map(json.loads, filter(str.strip, f)) if "raw_b64" in v]
    sent = answered = 0
    end = time.time() + a.seconds
    while time.time() < end and vectors:
        raw = vectors[sent % len(vectors)]
        sent += 1
        try:
            with socket.create_connection((a.host, a.port), timeout=2) as s:
                s.sendall(raw)
                s.shutdown(socket.SHUT_WR)
                if s.recv(16).startswith(b"HTTP/1."):
                    answered += 1
        except OSError:
            pass
        time.sleep(a.every)
    print(f"sent {sent} answered {answered}")


# ---------------------------------------------------------------- report

GOOD = {200, 206, 304}


def read_faults(path):
    """[(name, start, end, detail)] from the fault log (start/end lines)."""
    opened, windows, events = {}, [], []
    with open(path) as f:
        for t, what, name, *detail in csv.reader(f):
            t = float(t)
            if what == "start":
                opened[name] = (t, ",".join(detail))
            elif what == "end":
                start, d = opened.pop(name, (t, ""))
                windows.append((name, start, t, d))
            else:
                events.append((name, t, ",".join(detail)))
    for name, (start, d) in opened.items():
        windows.append((name, start, float("inf"), d))
    return windows, events


def timelines(out, server):
    """Every request of every load process: (start_epoch, end_epoch,
    status, url, error, client), and each process's run: its user agent,
    its time span, responses, client-side failures and connections."""
    rows, runs = [], []
    for meta in sorted(glob.glob(f"{out}/{server}-load-*.start")):
        base = meta[:-len(".start")]
        client = base.rsplit("-", 2)[-2]
        with open(meta) as f:
            t0 = float(f.read().split()[0])
        try:
            with open(base + ".json") as f:
                report = json.load(f)
            f = open(base + ".csv", newline="")
        except (OSError, ValueError):
            continue
        run = {"agent": "tern-bench/" + os.path.basename(base).replace("-load-", "-"), "start": t0,
               "end": t0 + report["elapsed_s"] + 1, "responses": 0, "errors": 0, "connections": report["connections"],
               "client": client, "failed": sum(v for k, v in report["errors"].items() if k != "status")}
        with f:
            for r in csv.DictReader(f):
                status = int(r["status"])
                rows.append((t0 + float(r["start_us"]) / 1e6, t0 + float(r["end_us"]) / 1e6, status, r["request"],
                             r["error"], client))
                run["responses" if status else "errors"] += 1
        # Requests it counted as timed out without a line in its timeline:
        # due, never sent (it fell behind its schedule by its timeout).
        run["unsent"] = max(0, run.pop("failed") - run["errors"])
        runs.append(run)
    rows.sort()
    return rows, runs


# Which failures each fault may cause: (clients, url test, failure test).
def may_fail(name, client, url, status, error):
    if name == "php-fpm-killed":
        return url.endswith(".php") and (status in (502, 503, 504) or error)
    if name == "upstream-killed":
        return "/up/" in url and (status in (502, 503, 504) or error)
    if name == "file-truncated":
        return "victim" in url
    if name == "descriptor-limit":
        return status == 503 or error in ("connect", "read", "timeout")
    if name == "netem":
        return client == "netns" and error in ("timeout", "read", "connect")
    return False


GRACE_BEFORE, GRACE_AFTER = 1.0, 3.0


def log_lines(path, prefix="tern-bench"):
    """From a combined log, the load generator's lines (user agent starting
    with PREFIX): ({epoch second: lines}, {user agent: lines})."""
    seconds, agents = {}, {}
    if not path or not os.path.exists(path):
        return seconds, agents
    months = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
    stamp = re.compile(rb"\[(\d\d)/(\w\w\w)/(\d{4}):(\d\d):(\d\d):(\d\d) ([+-]\d{4})\]")
    with open(path, "rb") as f:
        for line in f:
            line = line.rstrip()
            agent = line[line.rfind(b'"', 0, len(line) - 1) + 1:-1].decode(errors="replace")
            m = stamp.search(line)
            if not agent.startswith(prefix) or not m:
                continue
            d, mon, y, hh, mm, ss, tz = m.groups()
            t = calendar.timegm((int(y), months[mon.decode()], int(d), int(hh), int(mm), int(ss)))
            t -= (1 if tz[:1] == b"+" else -1) * (int(tz[1:3]) * 3600 + int(tz[3:5]) * 60)
            seconds[t] = seconds.get(t, 0) + 1
            agents[agent] = agents.get(agent, 0) + 1
    return seconds, agents


# Student's t, two-sided 95 %, by degrees of freedom (1-30; beyond, 2.0).
T95 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
       2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04]


def slope_per_hour(points):
    """Least-squares slope of (t, v) in % of the mean per hour, and the
    half-width of its 95 % confidence interval (None, None with fewer
    than 3 points)."""
    if len(points) < 3:
        return None, None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0 or mv == 0:
        return None, None
    s = sum((t - mt) * (v - mv) for t, v in points) / var
    residual = sum((v - mv - s * (t - mt)) ** 2 for t, v in points) / (n - 2)
    half = T95[min(n - 2, len(T95)) - 1] * math.sqrt(residual / var)
    scale = 3600 / mv * 100
    return s * scale, half * scale


def p99(values):
    if not values:
        return ""
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * 0.99))] * 1000, 2)


def report(a):
    out, server = a.dir, a.server
    windows, events = read_faults(f"{out}/{server}-faults.csv")
    rows, runs = timelines(out, server)
    with open(f"{out}/{server}-samples.csv", newline="") as f:
        samples = [{k: (v if k == "zombie_pids" else float(v) if v not in ("", None) else None) for k, v in r.items()}
                   for r in csv.DictReader(f)]
    with open(f"{out}/{server}-phases") as f:
        phases = dict((k, float(v)) for k, v in (line.split() for line in f))
    load_start, load_end = phases["load_start"], phases["load_end"]

    # Failures, attributed.
    causes, unattributed = {}, []
    per_second = {}
    for start, end, status, url, error, client in rows:
        sec = int(end)
        ps = per_second.setdefault(sec, {"done": 0, "lat": [], "fail": {}})
        ps["done"] += 1
        ps["lat"].append(end - start)
        if status in GOOD and not error:
            continue
        cause = None
        for name, ws, we, _ in windows:
            # Its lifetime overlaps the fault's (a request sent before it may
            # reach the server during it: over the lossy link, seconds later).
            if start <= we + GRACE_AFTER and end >= ws - GRACE_BEFORE and may_fail(name, client, url, status, error):
                cause = name
                break
        if cause is None and client == "netns" and may_fail("netem", client, url, status, error):
            cause = "netem"
        key = cause or "unattributed"
        causes[key] = causes.get(key, 0) + 1
        ps["fail"][key] = ps["fail"].get(key, 0) + 1
        if cause is None:
            unattributed.append((start, client, url, status or error))
    # A load process that fell behind its schedule: the server did not keep
    # up, which only the descriptor limit (its connections refused) or the
    # lossy namespace (its connections slowed by loss and delay) excuses.
    for run in runs:
        if run["unsent"]:
            cause = next((name for name, ws, we, _ in windows if name == "descriptor-limit"
                          and run["start"] <= we + GRACE_AFTER and run["end"] >= ws - GRACE_BEFORE), None)
            if run["client"] == "netns":
                cause = "netem"
            key = cause or "unattributed"
            causes[key] = causes.get(key, 0) + run["unsent"]
            if cause is None:
                unattributed.append((run["start"], run["client"], f"{run['unsent']} requests never sent", "behind"))

    # The access log against the load generator: each load process has
    # its own user agent, so the lines of each one clear of the disk-full
    # window are counted against its responses: no fewer; no more than
    # those it gave up on or left in flight when it stopped.
    full = [(ws - 3, we + 3) for name, ws, we, _ in windows if name == "log-disk-full"]
    logged, agents = log_lines(a.access_log) if a.access_log else ({}, {})
    clear = [r for r in runs if all(r["end"] < ws or r["start"] > we for ws, we in full)]
    responses = sum(r["responses"] for r in clear)
    lines = sum(agents.get(r["agent"], 0) for r in clear)
    log_ok = all(r["responses"] <= agents.get(r["agent"], 0) <= r["responses"] + r["errors"] + r["connections"]
                 for r in clear)

    # The per-second CSV.
    with open(f"{out}/{server}-soak.csv", "w", newline="") as f:
        w = csv.writer(f)
        fail_names = sorted({k for ps in per_second.values() for k in ps["fail"]})
        w.writerow(["t"] + SAMPLE_FIELDS[1:-1] + ["responses", "p99_ms", "bench_log_lines"]
                   + [f"fail_{k}" for k in fail_names])
        for s in samples:
            sec = int(s["time"])
            ps = per_second.get(sec, {"done": 0, "lat": [], "fail": {}})
            w.writerow([round(s["time"] - load_start, 1)] + ["" if s[k] is None else int(s[k]) for k in SAMPLE_FIELDS[1:-1]]
                       + [ps["done"], p99(ps["lat"]), logged.get(sec, 0)] + [ps["fail"].get(k, 0) for k in fail_names])

    # Memory and descriptors after warm-up (a fifth of the load, rounded up
    # to whole cycles of the fault schedule), excluding the fault that holds
    # descriptors. Each fault cycle raises and lowers them (1,200 held
    # connections, then none), a saw-tooth a fitted line over raw samples
    # reads as growth or shrinkage depending on where the run ends; so the
    # slope is fitted to one point per whole cycle, its median.
    cycle = a.cycle
    warm = load_start + max(1, math.ceil((load_end - load_start) * 0.2 / cycle)) * cycle
    fd_windows = [(ws, we) for name, ws, we, _ in windows if name == "descriptor-limit"]

    def steady(s):
        return warm <= s["time"] <= load_end and all(not (ws - 1 <= s["time"] <= we + 5) for ws, we in fd_windows)

    rss_pts = [(s["time"], s["rss_kib"]) for s in samples if steady(s)]
    cycles = int((load_end - warm) // cycle)

    def per_cycle(key):
        points = []
        for i in range(cycles):
            t0 = warm + i * cycle
            vs = sorted(s[key] for s in samples if t0 <= s["time"] < t0 + cycle and steady(s) and s[key] is not None)
            if vs:
                points.append((t0 + cycle / 2, vs[len(vs) // 2]))
        return points
    before = [s for s in samples if s["time"] < load_start]
    after = [s for s in samples if s["time"] > load_end + 3]
    base_fds = min((s["fds"] for s in before), default=None)
    end_fds = after[-1]["fds"] if after else None
    end_rss = after[-1]["rss_kib"] if after else None
    medians = {k: per_cycle(k) for k in ("rss_kib", "anon_kib", "fds")}
    slopes = {k: slope_per_hour(v) for k, v in medians.items()}
    long_enough = cycles >= 3

    # A zombie is a program that ended and was not reaped yet: one caught
    # between its exit and the next reap is normal, one seen for 3 s is not.
    # Counted in consecutive samples: over an hour of CGI programs a pid
    # comes back, and its zombies minutes apart are not one.
    zombie_run, last_seen = {}, {}
    max_run = 0
    for s in samples:
        for pid in (s["zombie_pids"] or "").split():
            run = zombie_run.get(pid, 0) + 1 if s["time"] - last_seen.get(pid, -10) < 1.5 else 1
            zombie_run[pid], last_seen[pid] = run, s["time"]
            max_run = max(max_run, run)
    end_zombies = int(after[-1]["zombies"]) if after else None
    ages = [s["max_tick_age_ms"] for s in samples if s["max_tick_age_ms"] is not None]
    watched = bool(ages)
    stalls = sum(1 for v in ages if v > 3000)
    lost = max((s["lines_lost"] or 0 for s in samples), default=0)

    checks = []

    def check(name, ok, value):
        checks.append((name, ok, value))

    offered = 0.0
    for path in glob.glob(f"{out}/{server}-load-*.json"):
        try:
            with open(path) as f:
                d = json.load(f)
            offered += d["rate"] * d["duration_s"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    good = sum(1 for r in rows if r[2] in GOOD and not r[4])
    check("load carried (answered / offered)", offered > 0 and len(rows) >= 0.95 * offered,
          f"{len(rows)} of {offered:.0f} ({len(rows) / offered * 100 if offered else 0:.1f} %), {good} good")
    check("failures not caused by a fault", not unattributed,
          f"{causes.get('unattributed', 0)}" + (f" (first: {unattributed[0]})" if unattributed else ""))
    for name in sorted(k for k in causes if k != "unattributed"):
        check(f"  failed by {name}", True, str(causes[name]))
    for name, t, detail in events:
        if name.startswith("result:"):
            ok = not detail.startswith("FAIL")
            check(f"  {name[7:]}", ok, detail)
    if a.access_log:
        check("log lines = responses (outside disk-full)", bool(clear) and log_ok,
              f"{lines} lines, {responses} responses: {len(clear)} of {len(runs)} load runs clear of the window,"
              " each within its failed and in-flight requests")
    if a.counts_lost:
        check("lost log lines counted (disk full)", lost > 0 or not full, f"{lost}")
    # A leak grows: the check fails when growth of 1 % of the mean per
    # hour or more is shown, the whole 95 % interval of the slope above it.
    # (An hour's cycle medians scatter by a few % — RSS by glibc giving
    # memory back or not — so a slope's interval is tens of %/h wide; the
    # slope alone, below 1 %/h or not, would be a coin's throw.)
    for key, name in (("rss_kib", "RSS"), ("anon_kib", "anonymous memory"), ("fds", "descriptor")):
        (slope, half), pts = slopes[key], medians[key]
        shown = " ".join(f"{v:.0f}" for _, v in pts)
        check(f"{name} growth after warm-up", not long_enough or (slope is not None and slope - half < 1),
              f"slope {slope:+.2f} %/h (95 % interval {slope - half:+.1f} to {slope + half:+.1f}) over {len(pts)} "
              f"cycle medians ({shown})" if long_enough and slope is not None
              else f"not judged: {cycles} whole cycles of {cycle:.0f} s after warm-up, 3 needed")
    check("descriptors back to baseline (+ pooled backend connections)",
          base_fds is not None and end_fds is not None and end_fds <= base_fds + a.pooled,
          f"{end_fds:.0f} after, {base_fds:.0f} before (+ up to {a.pooled} kept backend connections)"
          if end_fds is not None and base_fds is not None else "n/a")
    steady_rss = sorted(v for _, v in rss_pts[len(rss_pts) * 4 // 5:])
    under = steady_rss[len(steady_rss) // 2] if steady_rss else None
    check("RSS after load <= 110 % of its level under load",
          under is not None and end_rss is not None and end_rss <= under * 1.1,
          f"{end_rss:.0f} KiB after, {under:.0f} KiB (median of the load's last fifth)"
          if under is not None and end_rss is not None else "n/a")
    check("no zombie (one seen 3 s, or at end)", max_run < 3 and not end_zombies,
          f"longest seen {max_run} samples, {end_zombies} at end")
    if watched:
        check("no worker stalled (tick age <= 3 s)", stalls == 0, f"{stalls} samples, max {int(max(ages))} ms")
    with open(f"{out}/{server}-judgement.json", "w") as f:
        json.dump({"server": server, "checks": [{"check": c, "ok": ok, "value": v} for c, ok, v in checks],
                   "causes": causes, "unattributed": unattributed[:50]}, f, indent=1)
    for c, ok, v in checks:
        print(f"{server}\t{c}\t{'ok' if ok else 'FAIL'}\t{v}")
    if a.lab_template:
        lab_runs(a, samples, per_second, checks, load_start)
    return 0 if all(ok for _, ok, _ in checks) else 1


def lab_runs(a, samples, per_second, checks, load_start):
    """One lab run per window of samples (so the dashboard's x-y against
    time charts the series) and one for the judgement."""
    with open(a.lab_template) as f:
        template = json.load(f)["runs"][0]
    keep = {k: template[k] for k in ("environment", "tern_version", "config")}
    runs = []

    def run(label, t0, t1, measurements):
        return dict(keep, kind="soak", status="complete", command_line=a.command.split(), label=label,
                    started_at=t0, finished_at=t1, result={}, measurements=measurements, histograms=[])

    def m(metric, value, unit, better="lower"):
        return {"subject": a.server, "metric": metric, "value": value, "unit": unit, "better": better,
                "size": None, "concurrency": None, "cpus": None, "load": None}

    window = a.window
    for i in range(0, len(samples), window):
        chunk = [s for s in samples[i:i + window] if s["time"] >= load_start]
        if not chunk:
            continue
        secs = [per_second.get(int(s["time"]), {"done": 0, "lat": [], "fail": {}}) for s in chunk]
        lat = [x for ps in secs for x in ps["lat"]]
        mean = lambda k: sum((s[k] or 0) for s in chunk) / len(chunk)  # noqa: E731
        ms = [m("soak_rate", sum(ps["done"] for ps in secs) / len(chunk), "req/s", "higher"),
              m("soak_failures", sum(sum(ps["fail"].values()) for ps in secs), "requests"),
              m("soak_rss", mean("rss_kib"), "KiB"), m("soak_anon", mean("anon_kib"), "KiB"),
              m("soak_fds", mean("fds"), "descriptors"), m("soak_threads", mean("threads"), "threads"),
              m("soak_children", mean("children"), "processes"), m("soak_zombies", mean("zombies"), "processes")]
        if lat:
            ms.append(m("soak_p99", p99(lat), "ms"))
        if any(s["cache_bytes"] is not None for s in chunk):
            ms.append(m("soak_cache", mean("cache_bytes"), "bytes"))
        runs.append(run(f"{a.label} {a.server}", chunk[0]["time"], chunk[-1]["time"], ms))
    verdict = [m(f"soak_check: {c.strip()}", 1.0 if ok else 0.0, "ok", "higher") for c, ok, _ in checks]
    runs.append(run(f"{a.label} {a.server} judgement", samples[0]["time"], samples[-1]["time"], verdict))
    with open(f"{a.dir}/{a.server}-lab.json", "w") as f:
        json.dump({"format": "tern-lab-runs", "version": 1, "runs": runs}, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--stop", required=True)
    s.add_argument("--metrics")
    s.add_argument("--log")
    s.add_argument("--workers-are-children", action="store_true", help="nginx: the workers are the server")
    h = sub.add_parser("hold")
    h.add_argument("--host", default="127.0.0.1")
    h.add_argument("--port", type=int, required=True)
    h.add_argument("--conns", type=int, required=True)
    h.add_argument("--seconds", type=float, required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--host", default="127.0.0.1")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, required=True)
    c.add_argument("--dir", required=True)
    c.add_argument("--every", type=float, default=0.2)
    r = sub.add_parser("report")
    r.add_argument("--dir", required=True)
    r.add_argument("--server", required=True)
    r.add_argument("--access-log")
    r.add_argument("--counts-lost", action="store_true")
    r.add_argument("--lab-template")
    r.add_argument("--label", default="soak")
    r.add_argument("--command", default="bench/soak.sh")
    r.add_argument("--window", type=int, default=60)
    r.add_argument("--pooled", type=int, default=16,
                   help="connections a server may keep open to php-fpm (8) and to the proxy's upstream (8)")
    r.add_argument("--cycle", type=float, default=300, help="the fault schedule's period, s")
    a = ap.parse_args()
    sys.exit({"sample": sample, "hold": hold, "corpus": corpus, "report": report}[a.cmd](a) or 0)


if __name__ == "__main__":
    main()
