#!/usr/bin/env bash
# bench/compression.sh: experiment E4 (SPEC 2.7, 6) - real-time compression,
# tern beside nginx and lighttpd on 127.0.0.1 (issue 5).
#
# Pages: realistic HTML of exactly 6,040, 11,426, 22,132 and 41,518 bytes
# (bench/lib/compression_pages.py). Every request sends Accept-Encoding: gzip.
#
# Steady load, per server and page: wrk -tT -cC -dD --latency, R repetitions,
# the median reported: requests/s, p99, bytes on the wire per response (head +
# body, measured with curl, the body checked to decode to the page), the
# server's CPU time per request (utime+stime of its process tree from /proc),
# and ratios of tern to each peer. Servers:
#   tern-off        tern, [compression] enabled = false
#   tern-inline     tern, cold files compressed inline (adaptive = false)
#   tern-adaptive   tern, defaults (load-adaptive, cache)
#   tern-identity   tern-adaptive asked without Accept-Encoding: the identity
#                   baseline for "a cached compressed response costs <= 1.1x
#                   an identity response of the same file"
#   nginx-gzip1, nginx-gzip6   nginx `gzip on`, gzip_comp_level 1 / 6
#   lighttpd-cache  lighttpd mod_deflate with deflate.cache-dir
#   lighttpd-nocache  lighttpd mod_deflate without a cache directory
# Burst: each of BURST_SERVERS is started cold and hit at once by
# BURST_CONNS connections for BURST_DUR seconds, every request for the next
# of 4 x BURST_COPIES distinct pages, so every file is cold the first time:
# requests/s, p50, p99, max; tern's compression counters after. The load
# generator is `tern bench --mix` (native, one thread; wrk needs a Lua
# request() for this and tops out near 13k req/s here, which alone would
# set the latency). The files are read into the page cache right before
# each burst: cold for the servers' caches, not for the disk.
# The server is pinned to CPU 0 and wrk to CPU 1; tern's background
# compression threads share CPU 0 with its workers.
#
# Usage: bench/compression.sh [options]   (each option also has an env variable)
#   -d, --duration S        wrk seconds per steady run            DUR=5
#   -c, --connections N     wrk connections, steady runs          CONNS=64
#   -t, --threads N         wrk threads                           THREADS=1
#   -r, --reps N            repetitions (median reported)         REPS=3
#   -w, --workers N         server workers/processes              WORKERS=1
#   -s, --servers LIST      comma list (see above)                SERVERS=all
#   -p, --pages LIST        comma list of page sizes              PAGES=6040,11426,22132,41518
#       --warmup S          warm-up seconds per page (fills caches) WARMUP=2
#       --burst-servers LIST  servers for the burst               BURST_SERVERS=tern-off,tern-inline,tern-adaptive,nginx-gzip6,lighttpd-cache
#       --burst-conns N     connections opened at once            BURST_CONNS=256
#       --burst-duration S  burst seconds                         BURST_DUR=3
#       --burst-copies N    distinct pages per size               BURST_COPIES=4000
#       --no-burst          skip the burst                        NO_BURST=1
#       --no-pin            do not pin server/wrk to CPUs         PIN=0
#       --skip-build        do not run cargo build --release      SKIP_BUILD=1
#   -h, --help
# Output: tables on stdout; configs, logs, raw wrk output and results.json in
# bench/out/compression-YYYYmmdd-HHMMSS/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

DUR=${DUR:-5}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
REPS=${REPS:-3}
WORKERS=${WORKERS:-1}
SERVERS=${SERVERS:-tern-off,tern-inline,tern-adaptive,tern-identity,nginx-gzip1,nginx-gzip6,lighttpd-cache,lighttpd-nocache}
PAGES=${PAGES:-6040,11426,22132,41518}
WARMUP=${WARMUP:-2}
BURST_SERVERS=${BURST_SERVERS:-tern-off,tern-inline,tern-adaptive,nginx-gzip6,lighttpd-cache}
BURST_CONNS=${BURST_CONNS:-256}
BURST_DUR=${BURST_DUR:-3}
BURST_COPIES=${BURST_COPIES:-4000}
NO_BURST=${NO_BURST:-0}
PIN=${PIN:-1}
SKIP_BUILD=${SKIP_BUILD:-0}

readonly PACKAGES=(nginx lighttpd lighttpd-mod-deflate wrk curl gzip python3 procps util-linux)
readonly ALL_SERVERS=(tern-off tern-inline tern-adaptive tern-identity nginx-gzip1 nginx-gzip6 lighttpd-cache lighttpd-nocache)

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            -p|--pages) PAGES=$2; shift 2 ;;
            --burst-servers) BURST_SERVERS=$2; shift 2 ;;
            --burst-conns) BURST_CONNS=$2; shift 2 ;;
            --burst-duration) BURST_DUR=$2; shift 2 ;;
            --burst-copies) BURST_COPIES=$2; shift 2 ;;
            --no-burst) NO_BURST=1; shift ;;
            *) bench_option "duration connections threads reps workers servers warmup no-pin skip-build" "$@"; shift "$BENCH_SHIFT" ;;
        esac
    done
    local v s
    for v in DUR CONNS THREADS REPS WORKERS WARMUP BURST_CONNS BURST_DUR BURST_COPIES; do
        [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
    done
    IFS=, read -r -a SERVER_LIST <<<"$SERVERS"
    IFS=, read -r -a BURST_LIST <<<"$BURST_SERVERS"
    IFS=, read -r -a PAGE_LIST <<<"$PAGES"
    for s in "${SERVER_LIST[@]}" "${BURST_LIST[@]}"; do
        [[ " ${ALL_SERVERS[*]} " == *" $s "* ]] || bench_die "unknown server '$s' (known: ${ALL_SERVERS[*]})"
    done
    for s in "${PAGE_LIST[@]}"; do
        [[ " 6040 11426 22132 41518 " == *" $s "* ]] || bench_die "unknown page size '$s'"
    done
}

# ------------------------------------------------------------------ setup

setup() {
    "$ROOT/scripts/ensure-packages.sh" "${PACKAGES[@]}"
    bench_start_run compression
    bench_raise_fd_limit $((BURST_CONNS + 200)) "$BURST_CONNS connections"
    SERVER_PIN=() CLIENT_PIN=()
    if [[ $PIN == 1 ]] && (($(nproc) >= 2)); then
        SERVER_PIN=(taskset -c 0) CLIENT_PIN=(taskset -c 1)
    else
        PIN=0
    fi
    DOCROOT=$OUT/docroot
    local copies=0
    [[ $NO_BURST == 1 ]] || copies=$BURST_COPIES
    bench_log "writing pages (and $((copies * 4)) burst pages) to $DOCROOT"
    python3 "$ROOT/bench/lib/compression_pages.py" "$DOCROOT" "$copies"
    # Every burst page once, in turn (equal weights: tern bench walks the
    # list in order), so each is cold the first time.
    local i size
    for ((i = 0; i < copies; i++)); do
        for size in 6040 11426 22132 41518; do echo "/burst/p$size-$i.html"; done
    done >"$OUT/burst.mix"
    {
        printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'command\t%s\n' "$COMMAND_LINE"
        printf 'git_commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        printf 'nproc\t%s\n' "$(nproc)"
        printf 'kernel\t%s\n' "$(uname -r)"
        printf 'cpu_model\t%s\n' "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
        printf 'nginx\t%s\n' "$(nginx -v 2>&1 | head -n1)"
        printf 'lighttpd\t%s\n' "$(lighttpd -v 2>&1 | head -n1)"
        printf 'wrk\t%s\n' "$(wrk --version 2>&1 | head -n1 | sed 's/ Copyright.*//')"
        printf 'loadavg_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
        printf 'steady\twrk -t%s -c%s -d%ss --latency, %s reps (median), warm-up %ss\n' "$THREADS" "$CONNS" "$DUR" "$REPS" "$WARMUP"
        printf 'burst\ttern bench -t1 -c%s -d%ss --mix burst.mix -H "Accept-Encoding: gzip" (4 x %s distinct pages)\n' "$BURST_CONNS" "$BURST_DUR" "$BURST_COPIES"
        printf 'workers\t%s\n' "$WORKERS"
        printf 'pinning\t%s\n' "$( ((PIN)) && echo 'server on CPU 0, wrk on CPU 1' || echo none)"
        printf 'clk_tck\t%s\n' "$(getconf CLK_TCK)"
    } >"$OUT/meta.tsv"
}

write_config() {
    local name=$1
    case $name in
        tern-*)
            local comp="enabled = true"
            [[ $name == tern-off ]] && comp="enabled = false"
            [[ $name == tern-inline ]] && comp="adaptive = false"
            cat >"$RUNDIR/tern.toml" <<EOF
[server]
max_connections = 20000
backlog = 4096
[static]
open_file_cache = 20000
[limits]
keepalive_requests = 0
[timeouts]
keepalive = "300s"
[compression]
$comp
cache_memory = "256MiB"
EOF
            ;;
        nginx-*)
            cat >"$RUNDIR/nginx.conf" <<EOF
daemon off;
master_process on;
user root;
worker_processes $WORKERS;
worker_rlimit_nofile 40000;
pid $RUNDIR/nginx.pid;
error_log $RUNDIR/error.log warn;
events { worker_connections 10000; use epoll; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    open_file_cache max=20000 inactive=60s;
    server_tokens off;
    types { text/html html; }
    gzip on;
    gzip_comp_level ${name#nginx-gzip};
    gzip_vary on;
    gzip_min_length 256;
    client_body_temp_path $RUNDIR/client_body;
    proxy_temp_path $RUNDIR/proxy;
    fastcgi_temp_path $RUNDIR/fastcgi;
    uwsgi_temp_path $RUNDIR/uwsgi;
    scgi_temp_path $RUNDIR/scgi;
    server { listen 127.0.0.1:$PORT backlog=4096 reuseport; root $DOCROOT; }
}
EOF
            ;;
        lighttpd-*)
            local workers="" cache=""
            ((WORKERS > 1)) && workers="server.max-worker = $WORKERS"
            if [[ $name == lighttpd-cache ]]; then
                mkdir -p "$RUNDIR/deflate-cache"
                cache="deflate.cache-dir = \"$RUNDIR/deflate-cache\""
            fi
            cat >"$RUNDIR/lighttpd.conf" <<EOF
server.modules = ( "mod_deflate" )
server.document-root = "$DOCROOT"
server.bind = "127.0.0.1"
server.port = $PORT
$workers
server.pid-file = "$RUNDIR/lighttpd.pid"
server.errorlog = "$RUNDIR/error.log"
server.upload-dirs = ( "$RUNDIR" )
server.network-backend = "sendfile"
server.max-fds = 40000
server.max-connections = 10000
server.listen-backlog = 4096
server.max-keep-alive-requests = 65535
server.max-keep-alive-idle = 300
server.stat-cache-engine = "simple"
mimetype.assign = ( ".html" => "text/html" )
deflate.mimetypes = ( "text/html" )
deflate.allowed-encodings = ( "gzip" )
deflate.compression-level = 6
$cache
EOF
            ;;
    esac
}

# start_server NAME PHASE: sets SRV_PID, PORT, RUNDIR.
start_server() {
    local name=$1 phase=$2
    RUNDIR=$OUT/$name-$phase
    mkdir -p "$RUNDIR"
    PORT=$(free_port)
    local conf=$name
    [[ $name == tern-identity ]] && conf=tern-adaptive
    write_config "$conf"
    local -a cmd
    case $name in
        tern-*) cmd=("$TERN_BIN" serve "$DOCROOT" --listen "127.0.0.1:$PORT" --workers "$WORKERS"
                     --access-log off --config "$RUNDIR/tern.toml") ;;
        nginx-*) cmd=(nginx -e "$RUNDIR/error.log" -c "$RUNDIR/nginx.conf" -p "$RUNDIR/") ;;
        lighttpd-*) cmd=(lighttpd -D -f "$RUNDIR/lighttpd.conf") ;;
    esac
    printf '%q ' "${cmd[@]}" >"$RUNDIR/command.txt"
    "${SERVER_PIN[@]}" "${cmd[@]}" >"$RUNDIR/stdout.log" 2>"$RUNDIR/stderr.log" &
    SRV_PID=$!
    BENCH_PIDS+=("$SRV_PID")
    wait_http "http://127.0.0.1:$PORT/page-6040.html" "$SRV_PID" 15 && return 0
    bench_die "$name did not start: $(tail -n 5 "$RUNDIR/stderr.log" "$RUNDIR/error.log" 2>/dev/null | tr '\n' ' ')"
}

stop_server() {
    stop_tree "$SRV_PID"
    forget_pid "$SRV_PID"
}

# Head and body bytes of one response, the body checked against the page.
wire_bytes() {
    local name=$1 page=$2 ae=(-H 'Accept-Encoding: gzip')
    [[ $name == tern-identity ]] && ae=()
    local chk=$RUNDIR/check-$page
    local sizes
    sizes=$(curl -s -m 10 "${ae[@]}" -D "$chk.head" -o "$chk.body" -w '%{size_header} %{size_download}' \
        "http://127.0.0.1:$PORT/page-$page.html")
    local encoding
    encoding=$(awk -F': *' 'tolower($1) == "content-encoding" { sub(/\r$/, "", $2); print $2 }' "$chk.head")
    if [[ $encoding == gzip ]]; then
        gzip -dc <"$chk.body" >"$chk.plain" || bench_die "$name: /page-$page.html: the gzip body does not decode"
    else
        cp "$chk.body" "$chk.plain"
    fi
    cmp -s "$chk.plain" "$DOCROOT/page-$page.html" || bench_die "$name: /page-$page.html decodes to other bytes (see $chk.*)"
    rm -f "$chk.body" "$chk.plain"
    echo "$sizes ${encoding:-identity}"
}

# One wrk run with the server's CPU around it; appends a JSON line.
wrk_run() {
    local name=$1 page=$2 rep=$3 dur=$4
    local file=$RUNDIR/wrk-$page-$rep.txt ae=(-H 'Accept-Encoding: gzip')
    [[ $name == tern-identity ]] && ae=()
    local cpu0 cpu1 t0 t1
    cpu0=$(tree_cpu_ticks "$SRV_PID"); t0=$(date +%s.%N)
    timeout -k 5 $((dur + 30)) "${CLIENT_PIN[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${dur}s" --timeout 5s --latency \
        "${ae[@]}" "http://127.0.0.1:$PORT/page-$page.html" >"$file" 2>&1 || echo "wrk exited with $?" >>"$file"
    t1=$(date +%s.%N); cpu1=$(tree_cpu_ticks "$SRV_PID")
    kill -0 "$SRV_PID" 2>/dev/null || bench_die "$name died during page $page (see $RUNDIR)"
    [[ $rep == warmup ]] && return 0
    printf '{"kind":"steady","server":"%s","page":%s,"rep":%s,"wrk_file":"%s","server_cpu_ticks":%d,"wall_s":%s,"wire":"%s"}\n' \
        "$name" "$page" "$rep" "$file" $((cpu1 - cpu0)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')" \
        "$WIRE" >>"$RUNS"
}

steady() {
    local name=$1 page rep
    bench_log "=== $name"
    start_server "$name" steady
    for page in "${PAGE_LIST[@]}"; do
        wrk_run "$name" "$page" warmup "$WARMUP"
        WIRE=$(wire_bytes "$name" "$page")
        for rep in $(seq 1 "$REPS"); do
            wrk_run "$name" "$page" "$rep" "$DUR"
            bench_log "$name $page rep $rep: $(awk '/^Requests\/sec/ {print $2 " req/s"}' "$RUNDIR/wrk-$page-$rep.txt"), wire: $WIRE"
        done
    done
    [[ $name == tern-* ]] && curl -s -m 10 "http://127.0.0.1:$PORT/_tern/status" >"$RUNDIR/status.json"
    stop_server
}

burst() {
    local name=$1 file
    bench_log "=== burst: $name, $BURST_CONNS connections at once, ${BURST_DUR}s, all files cold"
    start_server "$name" burst
    # "Cold" means cold for the server's own caches, not for the disk: this
    # machine's kernel reclaims idle page cache proactively (DAMON), so the
    # pages are read in right before each burst, for every server alike.
    find "$DOCROOT/burst" -name '*.html' -exec cat {} + >/dev/null
    file=$RUNDIR/burst.json
    local cpu0 cpu1
    cpu0=$(tree_cpu_ticks "$SRV_PID")
    timeout -k 5 $((BURST_DUR + 30)) "${CLIENT_PIN[@]}" "$TERN_BIN" bench -t1 -c"$BURST_CONNS" -d"${BURST_DUR}s" \
        --timeout 5s --json --mix "$OUT/burst.mix" -H 'Accept-Encoding: gzip' "http://127.0.0.1:$PORT/" \
        >"$file" 2>"$RUNDIR/burst.err" || echo "tern bench exited with $?" >>"$RUNDIR/burst.err"
    cpu1=$(tree_cpu_ticks "$SRV_PID")
    local status=""
    if [[ $name == tern-* ]]; then
        curl -s -m 10 "http://127.0.0.1:$PORT/_tern/status" >"$RUNDIR/status.json"
        status=$RUNDIR/status.json
    fi
    printf '{"kind":"burst","server":"%s","bench_file":"%s","server_cpu_ticks":%d,"status_file":"%s"}\n' \
        "$name" "$file" $((cpu1 - cpu0)) "$status" >>"$RUNS"
    bench_log "burst $name: $(python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); print("%.0f req/s, p99 %.1f ms" % (d["requests_per_s"], d["latency"]["service"]["p99_us"] / 1e3))' "$file" 2>/dev/null || echo "no result, see $RUNDIR/burst.err")"
    stop_server
}

main() {
    COMMAND_LINE="bench/compression.sh${*:+ $*}"
    parse_args "$@"
    trap stop_all EXIT
    trap 'exit 130' INT TERM
    setup
    bench_build_tern
    ((TERN_OK)) || bench_die "tern is needed for this benchmark"
    local start=$SECONDS name
    for name in "${SERVER_LIST[@]}"; do steady "$name"; done
    if [[ $NO_BURST != 1 ]]; then
        for name in "${BURST_LIST[@]}"; do burst "$name"; done
    fi
    printf 'loadavg_end\t%s\nelapsed_s\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" $((SECONDS - start)) >>"$OUT/meta.tsv"
    python3 "$ROOT/bench/lib/compression_report.py" "$OUT" | tee "$OUT/report.md"
    bench_log "raw data and results.json in $OUT"
}

main "$@"
