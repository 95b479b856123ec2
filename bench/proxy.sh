#!/usr/bin/env bash
# bench/proxy.sh: reverse-proxy benchmark (issue 32), on 127.0.0.1.
#
# Part "one": one upstream, a tern serving a 1 KiB and a 40 KiB file (one
# worker, pinned to its own CPU), behind tern, nginx (proxy_pass to an
# upstream block with keepalive), HAProxy (http-reuse always), Caddy
# (reverse_proxy) and h2o (proxy.reverse.url), all from Debian's packages,
# all up at once, each pinned to CPU 0 with WORKERS workers. Per round
# (servers in rotating order) and file: a 1 s warm-up, then a measured
# `wrk -t1 -cCONNS -dDUR --latency`. Reported from the median round:
# requests/s, its ratio to the best other server, p99, the proxy's CPU per
# request (utime+stime of its whole process tree, before/after), the
# connections the upstream accepted during the measured run (its status
# page: a proxy that pools opens none) and the proxy's connections to the
# upstream mid-run (ss). Every proxy adds X-Forwarded-For (nginx and
# HAProxy told to, as deployed; the others by default) and keeps
# connections to the upstream alive for at least 64 requests at once and
# without a request limit.
#
# Part "two": two such upstreams (both on the upstream CPU), least
# connections, the 1 KiB file; also each upstream's share of the requests.
# h2o 2.2 forwards a path to one URL (balancing came in 2.3): not in it.
#
# Part "strace": system calls per proxied request (1 KiB), per proxy:
# strace -f -c attached to its processes while wrk -t1 -c1 makes
# sequential keep-alive requests for STRACE_DUR seconds; calls / requests.
#
# CPUs: the proxy on CPU 0, the upstream(s) on CPU 1, wrk on CPU 2 when the
# host has three or more (else beside the upstream on CPU 1).
#
# Usage: bench/proxy.sh [one|two|strace|all]   env: DUR=10 REPS=3 CONNS=64
#        WORKERS=1 STRACE_DUR=3 SKIP_BUILD=0
#        SERVERS="tern nginx haproxy caddy h2o" (which proxies, in order)
# Output: tables on stdout and in bench/out/proxy-*/results.md, with the
# machine's load before each part; configs, logs and wrk's output beside.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

PART=${1:-all}
[[ $PART == -h || $PART == --help ]] && bench_usage 0
DUR=${DUR:-10}
REPS=${REPS:-3}
CONNS=${CONNS:-64}
WORKERS=${WORKERS:-1}
STRACE_DUR=${STRACE_DUR:-3}
SERVERS=${SERVERS:-tern nginx haproxy caddy h2o}
HZ=$(getconf CLK_TCK)
PROXY_CPU=0
UPSTREAM_CPU=1
WRK_CPU=$(($(nproc) > 2 ? 2 : 1))
((WORKERS > 0)) || bench_die "WORKERS must be at least 1"

bench_start_run proxy
trap stop_all EXIT
"$ROOT/scripts/ensure-packages.sh" nginx haproxy caddy h2o wrk strace curl iproute2 procps util-linux python3
bench_build_tern
((TERN_OK)) || bench_die "no tern binary"
(($(nproc) >= 2)) || bench_die "needs two CPUs (proxy and upstream apart)"
bench_raise_fd_limit 10000 "five proxies and their upstreams"
RESULTS=$OUT/results.md

# launch NAME CPU CMD...: starts CMD pinned to CPU in its own session (so
# stopping it never touches ours), its output in $OUT; sets LAUNCHED.
launch() {
    local name=$1 cpu=$2
    shift 2
    setsid taskset -c "$cpu" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null &
    LAUNCHED=$!
    BENCH_PIDS+=("$LAUNCHED")
}

# wait_ok URL NAME: until URL answers 200.
wait_ok() {
    local i
    for i in $(seq 100); do
        [[ $(curl -s -o /dev/null -m 1 -w '%{http_code}' "$1") == 200 ]] && return 0
        sleep 0.1
    done
    bench_die "$2 does not answer $1 (see $OUT/$2.err)"
}

# ------------------------------------------------------------------ upstreams
DOCROOT=$OUT/www
mkdir -p "$DOCROOT"
head -c 1024 /dev/urandom >"$DOCROOT/1k.bin"
head -c 40960 /dev/urandom >"$DOCROOT/40k.bin"
cat >"$OUT/upstream.toml" <<EOF
[log]
access = "off"
[limits]
keepalive_requests = 0
[timeouts]
keepalive = "300s"
EOF

# start_upstream N: tern on its CPU; sets UP_PORT[N] and UP_PID[N].
declare -A UP_PORT=() UP_PID=()
start_upstream() {
    local port
    port=$(free_port)
    launch "upstream$1" "$UPSTREAM_CPU" "$TERN_BIN" serve "$DOCROOT" --listen "127.0.0.1:$port" --workers 1 \
        --config "$OUT/upstream.toml"
    UP_PID[$1]=$LAUNCHED
    UP_PORT[$1]=$port
    wait_ok "http://127.0.0.1:$port/1k.bin" "upstream$1"
}

# upstream_figures N: "accepted requests" from upstream N's status page.
upstream_figures() {
    curl -s -m 2 "http://127.0.0.1:${UP_PORT[$1]}/_tern/status" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["connections"]["accepted"], d["requests"]["total"])'
}

# ------------------------------------------------------------------ proxies
# start_proxy NAME BALANCE UPSTREAM...: NAME on CPU 0 in front of the
# upstreams (by number), BALANCE "round-robin" or "least-connections"; sets
# PROXY_PORT[NAME] and PROXY_PID[NAME].
declare -A PROXY_PORT=() PROXY_PID=()
start_proxy() {
    local name=$1 balance=$2 dir=$OUT/$1-$2 port n
    shift 2
    mkdir -p "$dir"
    port=$(free_port)
    local -a addrs=()
    for n in "$@"; do addrs+=("127.0.0.1:${UP_PORT[$n]}"); done
    case $name in
        tern)
            {
                printf '[server]\nworkers = %s\n[log]\naccess = "off"\n[limits]\nkeepalive_requests = 0\n' "$WORKERS"
                printf '[upstream.app]\nbalance = "%s"\nservers = [' "$balance"
                local sep=""
                for a in "${addrs[@]}"; do printf '%s{ address = "%s", max_connections = %s }' "$sep" "$a" "$CONNS"; sep=", "; done
                printf ']\n[[site]]\ndefault = true\nproxy = "app"\n'
            } >"$dir/tern.toml"
            launch "$name-$balance" "$PROXY_CPU" "$TERN_BIN" serve "$dir" --listen "127.0.0.1:$port" --config "$dir/tern.toml" ;;
        nginx)
            mkdir -p "$dir/tmp"
            {
                printf 'daemon off;\nmaster_process on;\nuser root;\nworker_processes %s;\npid %s/nginx.pid;\n' "$WORKERS" "$dir"
                printf 'error_log %s/error.log warn;\nevents { worker_connections 4096; }\nhttp {\n' "$dir"
                printf '    access_log off;\n    keepalive_requests 1000000000;\n    keepalive_timeout 300s;\n'
                printf '    client_body_temp_path %s/tmp; proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp;\n' "$dir" "$dir" "$dir"
                printf '    uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;\n    upstream app {\n' "$dir" "$dir"
                [[ $balance == least-connections ]] && printf '        least_conn;\n'
                for a in "${addrs[@]}"; do printf '        server %s;\n' "$a"; done
                printf '        keepalive %s;\n        keepalive_requests 1000000000;\n        keepalive_timeout 300s;\n    }\n' "$CONNS"
                printf '    server {\n        listen 127.0.0.1:%s backlog=4096 reuseport;\n        location / {\n' "$port"
                printf '            proxy_pass http://app;\n            proxy_http_version 1.1;\n'
                printf '            proxy_set_header Connection "";\n            proxy_set_header Host $host;\n'
                printf '            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n'
                printf '            proxy_set_header X-Forwarded-Proto $scheme;\n        }\n    }\n}\n'
            } >"$dir/nginx.conf"
            launch "$name-$balance" "$PROXY_CPU" nginx -e "$dir/error.log" -c "$dir/nginx.conf" -p "$dir/" ;;
        haproxy)
            {
                printf 'global\n    nbthread %s\n    maxconn 4096\n' "$WORKERS"
                printf 'defaults\n    mode http\n    option http-keep-alive\n    option forwardfor\n    http-reuse always\n'
                printf '    timeout connect 2s\n    timeout client 300s\n    timeout server 300s\n    timeout http-keep-alive 300s\n'
                printf 'frontend fe\n    bind 127.0.0.1:%s\n    default_backend be\n' "$port"
                printf 'backend be\n    balance %s\n' "$([[ $balance == least-connections ]] && echo leastconn || echo roundrobin)"
                for n in "${!addrs[@]}"; do printf '    server up%s %s\n' "$n" "${addrs[$n]}"; done
            } >"$dir/haproxy.cfg"
            launch "$name-$balance" "$PROXY_CPU" haproxy -db -f "$dir/haproxy.cfg" ;;
        caddy)
            {
                printf '{\n    admin off\n    auto_https off\n}\n'
                printf 'http://127.0.0.1:%s {\n    reverse_proxy %s {\n' "$port" "${addrs[*]}"
                [[ $balance == least-connections ]] && printf '        lb_policy least_conn\n'
                printf '        transport http {\n            keepalive 300s\n            keepalive_idle_conns_per_host %s\n' "$CONNS"
                printf '        }\n    }\n}\n'
            } >"$dir/Caddyfile"
            launch "$name-$balance" "$PROXY_CPU" env HOME="$dir" XDG_CONFIG_HOME="$dir" XDG_DATA_HOME="$dir" \
                GOMAXPROCS="$WORKERS" caddy run --config "$dir/Caddyfile" --adapter caddyfile ;;
        h2o)
            (($# == 1)) || bench_die "h2o 2.2 proxies a path to one URL"
            {
                printf 'num-threads: %s\nmax-connections: 4096\nuser: root\npid-file: %s/h2o.pid\n' "$WORKERS" "$dir"
                printf 'error-log: %s/error.log\nhttp1-request-timeout: 300\nlisten:\n  host: 127.0.0.1\n  port: %s\n' "$dir" "$port"
                printf 'hosts:\n  default:\n    paths:\n      /:\n        proxy.reverse.url: http://%s/\n' "${addrs[0]}"
                printf '        proxy.preserve-host: ON\n        proxy.timeout.keepalive: 300000\n'
            } >"$dir/h2o.conf"
            launch "$name-$balance" "$PROXY_CPU" h2o -c "$dir/h2o.conf" ;;
        *) bench_die "unknown proxy $name" ;;
    esac
    PROXY_PID[$name]=$LAUNCHED
    PROXY_PORT[$name]=$port
    wait_ok "http://127.0.0.1:$port/1k.bin" "$name-$balance"
    local f
    for f in 1k 40k; do
        cmp -s <(curl -s -m 5 "http://127.0.0.1:$port/$f.bin") "$DOCROOT/$f.bin" ||
            bench_die "$name sends other bytes than the upstream's $f.bin"
    done
}

stop_proxies() {
    local name
    for name in "${!PROXY_PID[@]}"; do
        stop_tree "${PROXY_PID[$name]}"
        forget_pid "${PROXY_PID[$name]}"
    done
    PROXY_PID=()
    PROXY_PORT=()
}

# ------------------------------------------------------------------ measuring
# measure NAME FILE UPSTREAM...: a 1 s warm-up and a measured wrk run through
# proxy NAME; prints "req_per_s p99_ms proxy_us_per_req accepted conns_mid
# non2xx socket_errors requests..." (accepted: connections the upstreams
# accepted from 1 s into the run to its end; conns_mid: the proxy's
# established connections to them half-way; requests: each upstream's over
# the same span).
measure() {
    local name=$1 file=$2 url n sampler c0 c1 out
    shift 2
    url=http://127.0.0.1:${PROXY_PORT[$name]}/$file.bin
    taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d1 "$url" >/dev/null 2>&1
    local -a after=()
    c0=$(tree_cpu_ticks "${PROXY_PID[$name]}")
    local filter="" pids
    for n in "$@"; do filter+="${filter:+ or }dport = :${UP_PORT[$n]}"; done
    pids=$(proc_tree "${PROXY_PID[$name]}" | paste -sd'|')
    # The upstreams' counts from 1 s in (connections the previous run's end
    # cut are replaced by then), the proxy's connections half-way.
    (
        sleep 1
        for n in "$@"; do upstream_figures "$n"; done | paste -sd' ' >"$OUT/from-1s"
        sleep "$((DUR / 2 - 1))"
        ss -Htnp state established "( $filter )" | grep -Ec "pid=($pids)," >"$OUT/mid-run" || true
    ) &
    sampler=$!
    out=$(taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"$DUR" --latency "$url")
    c1=$(tree_cpu_ticks "${PROXY_PID[$name]}")
    wait "$sampler" || true
    for n in "$@"; do after+=("$(upstream_figures "$n")"); done
    echo "$out" >>"$OUT/wrk-$name-$file.txt"
    python3 - "$out" "$((c1 - c0))" "$HZ" "$(cat "$OUT/mid-run")" "$(cat "$OUT/from-1s")" "${after[*]}" <<'EOF'
import re, sys
out, cpu, hz, mid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
before, after = [int(x) for x in sys.argv[5].split()], [int(x) for x in sys.argv[6].split()]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
total = int(re.search(r"(\d+) requests in", out).group(1))
m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
p99 = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
sock = sum(int(g) for g in sock.groups()) if sock else 0
# Less the status page's own request (and connection) that read "after".
accepted = sum(after[i] - before[i] - 1 for i in range(0, len(before), 2))
requests = [str(after[i] - before[i] - 1) for i in range(1, len(before), 2)]
print(f"{rps:.0f} {p99:.2f} {cpu * 1e6 / hz / max(total, 1):.2f} {accepted} {mid} {non2xx.group(1) if non2xx else 0} {sock} {' '.join(requests)}")
EOF
}

# table TITLE ROWS...: the median round per server of "name=line;line;|".
table() {
    python3 - "$@" <<'EOF' | tee -a "$RESULTS"
import sys, statistics
title, parts = sys.argv[1], sys.argv[2:]
servers = {}
for part in parts:
    name, rows = part.split("=", 1)
    servers[name] = sorted((r.split() for r in rows.split(";") if r), key=lambda r: float(r[0]))
med = {n: float(rows[len(rows) // 2][0]) for n, rows in servers.items()}
shares = any(len(rows[0]) > 8 for rows in servers.values())
print()
print(f"| {title} | req/s (median; runs) | ÷ best other | p99 ms | proxy CPU µs/req | upstream conns accepted | proxy→upstream conns | non-2xx | socket errors |" + (" upstream A : B requests |" if shares else ""))
print("|---|---|---|---|---|---|---|---|---|" + ("---|" if shares else ""))
for name, rows in servers.items():
    m = rows[len(rows) // 2]
    others = [v for n, v in med.items() if n != name]
    ratio = f"{med[name] / max(others):.2f}" if others else "-"
    cpu = statistics.median(float(r[2]) for r in rows)
    line = f"| {name} | {m[0]} ({', '.join(r[0] for r in rows)}) | {ratio} | {m[1]} | {cpu:.2f} | {m[3]} | {m[4]} | {m[5]} | {m[6]} |"
    if shares:
        line += f" {m[7]} : {m[8]} |"
    print(line)
EOF
}

# run_part TITLE BALANCE FILES UPSTREAM...: every proxy up in front of the
# upstreams, REPS rounds in rotating order, a table per file.
run_part() {
    local title=$1 balance=$2 files=$3 r i name file line
    shift 3
    local -a servers=()
    for name in $SERVERS; do
        # h2o 2.2 proxies a path to one URL.
        [[ $name == h2o && $# -gt 1 ]] || servers+=("$name")
    done
    for name in "${servers[@]}"; do start_proxy "$name" "$balance" "$@"; done
    declare -A RES=()
    for ((r = 0; r < REPS; r++)); do
        for ((i = 0; i < ${#servers[@]}; i++)); do
            name=${servers[$(((i + r) % ${#servers[@]}))]}
            for file in $files; do
                line=$(measure "$name" "$file" "$@")
                bench_log "$name $file round $r: $line"
                RES[$name,$file]+="$line;"
            done
        done
    done
    for file in $files; do
        local -a rows=()
        for name in "${servers[@]}"; do rows+=("$name=${RES[$name,$file]}"); done
        table "$title, $file" "${rows[@]}"
    done
    stop_proxies
}

describe() {
    bench_say "tern $("$TERN_BIN" --version 2>/dev/null | head -n1), $(nginx -v 2>&1), $(haproxy -v | head -n1 | cut -d' ' -f1-3), caddy $(caddy version | cut -d' ' -f1), $(h2o --version | head -n1)"
    bench_say "proxies on CPU $PROXY_CPU with $WORKERS worker(s); upstream tern(s) (1 worker) on CPU $UPSTREAM_CPU; wrk -t1 -c$CONNS -d$DUR on CPU $WRK_CPU; $REPS rounds, median"
}

part_one() {
    bench_say ""
    bench_say "## Reverse proxy: one upstream, five proxies ($(date -u +%Y-%m-%dT%H:%MZ))"
    bench_machine_state
    describe
    start_upstream 1
    run_part "one upstream" round-robin "1k 40k" 1
}

part_two() {
    bench_say ""
    bench_say "## Reverse proxy: two upstreams, least connections ($(date -u +%Y-%m-%dT%H:%MZ))"
    bench_machine_state
    describe
    [[ -n ${UP_PID[1]:-} ]] || start_upstream 1
    start_upstream 2
    run_part "two upstreams, least connections" least-connections "1k" 1 2
}

# ------------------------------------------------------------------ syscalls
# strace_proxy NAME: system calls per request through NAME (1 KiB, one
# connection); prints "calls_per_request top_calls".
strace_proxy() {
    local name=$1 sfile=$OUT/strace-$1.txt wfile=$OUT/wrk-strace-$1.txt pid spid n=0 attached
    local -a args=()
    for pid in $(proc_tree "${PROXY_PID[$name]}"); do args+=(-p "$pid"); n=$((n + 1)); done
    strace -f -c -o "$sfile" "${args[@]}" 2>"$sfile.err" &
    spid=$!
    BENCH_PIDS+=("$spid")
    for _ in $(seq 1 100); do
        attached=$(grep -c 'attached' "$sfile.err" 2>/dev/null) || true
        ((${attached:-0} >= n)) && break
        sleep 0.05
    done
    taskset -c "$WRK_CPU" wrk -t1 -c1 -d"$STRACE_DUR" "http://127.0.0.1:${PROXY_PORT[$name]}/1k.bin" >"$wfile" 2>&1 || true
    kill -INT "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    forget_pid "$spid"
    python3 - "$sfile" "$wfile" <<'EOF'
import re, sys
text, wrk = open(sys.argv[1]).read(), open(sys.argv[2]).read()
requests = int(re.search(r"(\d+) requests in", wrk).group(1))
calls = {}
for line in text.splitlines():
    f = line.split()
    if len(f) >= 5 and f[-1] != "total" and f[3].isdigit():
        calls[f[-1]] = int(f[3])
total = sum(calls.values())
top = sorted(calls.items(), key=lambda kv: -kv[1])[:6]
print(f"{total / requests:.2f} " + ", ".join(f"{k} {v / requests:.2f}" for k, v in top))
EOF
}

part_strace() {
    bench_say ""
    bench_say "## Reverse proxy: system calls per request ($(date -u +%Y-%m-%dT%H:%MZ))"
    bench_machine_state
    bench_say "strace -f -c on each proxy's processes while wrk -t1 -c1 -d$STRACE_DUR asks the 1 KiB file on one kept-alive connection; calls / requests wrk completed (strace slows each call: the counts matter, not the rate)"
    [[ -n ${UP_PID[1]:-} ]] || start_upstream 1
    local -a servers
    read -r -a servers <<<"$SERVERS"
    bench_say ""
    bench_say "| proxy | syscalls per request | the most frequent, per request |"
    bench_say "|---|---|---|"
    local name line
    for name in "${servers[@]}"; do
        start_proxy "$name" round-robin 1
        line=$(strace_proxy "$name")
        bench_say "| $name | ${line%% *} | ${line#* } |"
        stop_proxies
    done
}

case $PART in
    one) part_one ;;
    two) part_two ;;
    strace) part_strace ;;
    all) part_one; part_two; part_strace ;;
    *) bench_usage 2 ;;
esac
bench_log "results: $RESULTS"
