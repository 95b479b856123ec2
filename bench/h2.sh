#!/usr/bin/env bash
# bench/h2.sh: HTTP/2 benchmark (issue 33), on 127.0.0.1, over TLS (one
# ECDSA P-256 certificate made by the script, the same file for everyone).
#
# Part "files": tern (`[http2] protocols = ["h2", "h2c"]`), nginx (`listen
# ... ssl http2`, keepalive_requests raised: at its default of 1,000 it ends
# every connection and h2load counts failures) and h2o (Debian's 2.2.5),
# all up at once, access logs off, each serving the same 1 KiB and 40 KiB
# files. For each file and shape (connections x streams: `-c32 -m10` and
# `-c1 -m100`), each server is loaded by `h2load -t1` and by `tern bench
# --h2 -t1` for DUR seconds, REPS times, the servers' order rotating and the
# client that goes first alternating per repetition (noise from other work
# is shared); medians are reported. Per run: requests/s, the server's CPU
# per response (utime+stime of its process tree, and of the children it
# reaped, from /proc, before and after the run) and the client's CPU per
# request (its user+system time, from /usr/bin/time).
#
# Part "mix": HTTP/1.1 against HTTP/2 on the demo site's page set
# (site/demo.mix, the site built with `make -C gateway demo` into a copy):
# tern with TLS serves it over HTTP/1.1 (`tern bench --mix -cMIX_CONNS`),
# over HTTP/2 on as many connections (`--h2 -cMIX_CONNS`) and on one
# connection with as many streams (`--h2 -c1 --streams MIX_CONNS`, a
# browser's way); requests/s, p99 and the server's CPU per response. The
# mix's CGI entries are answered on their streams as over HTTP/1.1.
#
# Both parts run twice: "unpinned" (WORKERS workers, everyone on every CPU)
# and "pinned" (one worker, the server on CPU 1, the client on CPU 0).
#
# Usage: bench/h2.sh [options]     (each option also has an env variable)
#   -d, --duration S      seconds per run                        DUR=5
#   -r, --reps N          runs per cell, server and client       REPS=3
#   -w, --workers N       server workers when unpinned           WORKERS=2
#   -s, --servers LIST    comma list of tern,nginx,h2o           SERVERS=tern,nginx,h2o
#       --modes LIST      comma list of unpinned,pinned          MODES=unpinned,pinned
#       --parts LIST      comma list of files,mix                PARTS=files,mix
#       --mix-conns N     connections (streams) of the mix rows  MIX_CONNS=32
#       --warmup S        warm-up per server, file and mode      WARMUP=1
#       --quick           a smoke run: 1 s per run, 1 run, no warm-up
#       --skip-build      do not run cargo build                 SKIP_BUILD=1
#   -h, --help
# Output: the tables (markdown, ready for bench/RESULTS.md) on stdout and in
# bench/out/h2-YYYYmmdd-HHMMSS/results.md, after a header with the date,
# the commit and the load before the run; configs, logs, every client's
# output and runs.tsv beside. Every process started is stopped by its PID
# on exit, Ctrl-C included.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"
# shellcheck source=bench/lib/tls_peers.sh
source "$ROOT/bench/lib/tls_peers.sh"

DUR=${DUR:-5}
REPS=${REPS:-3}
WORKERS=${WORKERS:-2}
SERVERS=${SERVERS:-tern,nginx,h2o}
MODES=${MODES:-unpinned,pinned}
PARTS=${PARTS:-files,mix}
MIX_CONNS=${MIX_CONNS:-32}
WARMUP=${WARMUP:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
readonly FILES=(1k:1024 40k:40960)
readonly SHAPES=(32x10 1x100)
readonly PACKAGES=(nginx h2o nghttp2-client openssl curl procps util-linux time make gcc python3)

while [[ $# -gt 0 ]]; do
    case $1 in
        --modes) MODES=${2:?$1 needs a value}; shift 2 ;;
        --parts) PARTS=${2:?$1 needs a value}; shift 2 ;;
        --mix-conns) MIX_CONNS=${2:?$1 needs a value}; shift 2 ;;
        --quick) DUR=1 REPS=1 WARMUP=0; shift ;;
        *) bench_option "duration reps workers servers warmup skip-build" "$@"; shift "$BENCH_SHIFT" ;;
    esac
done
for v in DUR REPS WORKERS MIX_CONNS; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
done
[[ $WARMUP =~ ^[0-9]+$ ]] || bench_die "WARMUP must be a whole number of seconds (got '$WARMUP')"
IFS=, read -r -a SERVER_LIST <<<"$SERVERS"
IFS=, read -r -a MODE_LIST <<<"$MODES"

"$ROOT/scripts/ensure-packages.sh" "${PACKAGES[@]}"
bench_start_run h2
trap stop_all EXIT
trap 'exit 130' INT TERM
bench_raise_fd_limit 4096 "the connections"
bench_build_tern
((TERN_OK)) || bench_die "no tern binary"
HZ=$(getconf CLK_TCK)
RESULTS=$OUT/results.md
RUNS=$OUT/runs.tsv
printf 'part\tmode\tcase\tshape\tserver\tclient\trep\trps\tresponses\terrors\tp99_us\tserver_ticks\tclient_ms\n' >"$RUNS"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$OUT/ecdsa.key" -out "$OUT/ecdsa.pem" 2>/dev/null
DOCROOT=$OUT/docroot
mkdir -p "$DOCROOT"
for f in "${FILES[@]}"; do
    head -c "${f#*:}" < <(yes 'tern h2 benchmark: the same bytes every run. 0123456789abcdefghijklmnopqrstuvwxyz') \
        >"$DOCROOT/${f%%:*}.bin"
done

# server_ticks PID: CPU ticks of PID's process tree, and of the children it
# reaped (a CGI program's time lands in its parent's cutime and cstime).
server_ticks() {
    local stat
    local -a f
    stat=$(cat /proc/"$1"/stat 2>/dev/null) || { echo 0; return; }
    read -r -a f <<<"${stat##*) }"
    echo $(($(tree_cpu_ticks "$1") + f[13] + f[14]))   # fields 16 (cutime) and 17 (cstime)
}

# launch NAME CMD...: CMD in its own session (nginx and h2o signal their
# process group when they stop), pinned as the mode says, output in $OUT;
# sets PID[NAME].
declare -A PID=() PORT=()
launch() {
    local name=$1
    shift
    setsid "${SERVER_PIN[@]}" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null &
    PID[$name]=$!
    BENCH_PIDS+=("$!")
}

# start_SERVER DIR PORT WORKERS: the server on https://127.0.0.1:PORT with
# the benchmark's docroot (tern: TERN_ROOT may replace it, and TERN_EXTRA
# adds to its configuration).
start_tern() {
    local dir=$1
    PORT[tern-status]=$(free_port)
    tern_tls_conf "$dir/tern.toml" "${PORT[tern-status]}" "$2" "$OUT/ecdsa.pem" "$OUT/ecdsa.key" "${TERN_ROOT:-$DOCROOT}" \
        "$3" $'[http2]\nprotocols = ["h2", "h2c"]\n'"${TERN_EXTRA:-}"
    launch "$(basename "$dir")" "$TERN_BIN" serve --config "$dir/tern.toml"
}

start_nginx() {
    nginx_tls_conf "$1" "$2" "$OUT/ecdsa.pem" "$OUT/ecdsa.key" "$DOCROOT" "$3" 1 http2
    launch "$(basename "$1")" nginx -c "$1/nginx.conf" -p "$1"
}

start_h2o() {
    h2o_tls_conf "$1" "$2" "$OUT/ecdsa.pem" "$OUT/ecdsa.key" "$DOCROOT" "$3" 1
    launch "$(basename "$1")" h2o -c "$1/h2o.conf"
}

# start NAME SERVER WORKERS: SERVER (tern, nginx or h2o) as NAME on a free
# port; waits until PATH (default /1k.bin) comes back over HTTP/2, whole.
start() {
    local name=$1 server=$2 dir=$OUT/$1 i version
    mkdir -p "$dir"
    PORT[$name]=$(free_port)
    "start_$server" "$dir" "${PORT[$name]}" "$3"
    for i in $(seq 100); do
        kill -0 "${PID[$name]}" 2>/dev/null || break
        version=$(curl -sk --http2 -m 2 -o "$dir/check.bin" -w '%{http_version}' \
            "https://127.0.0.1:${PORT[$name]}${CHECK_PATH:-/1k.bin}" 2>/dev/null) || version=
        [[ $version == 2 ]] && break
        sleep 0.1
    done
    [[ $version == 2 ]] || bench_die "$name does not answer over HTTP/2 (see $OUT/$name.err and $dir)"
    [[ -n ${CHECK_PATH:-} ]] || cmp -s "$dir/check.bin" "$DOCROOT/1k.bin" || bench_die "$name serves another /1k.bin"
    if [[ $server == tern ]]; then
        wait_calibrated "http://127.0.0.1:${PORT[tern-status]}" "$dir/status.json" || true
    fi
}

stop() {
    stop_tree "${PID[$1]}"
    forget_pid "${PID[$1]}"
}

# measure PART MODE CASE SHAPE NAME CLIENT REP URL ARGS...: one run of
# CLIENT (h2load, or tern-bench: `tern bench`, which speaks HTTP/2 when ARGS
# say --h2) with SHAPE's connections x streams, and the CPU of the server
# NAME around it; appends a row to runs.tsv (unless REP is "warmup").
measure() {
    local part=$1 mode=$2 case=$3 shape=$4 name=$5 client=$6 rep=$7 url=$8
    shift 8
    local log=$OUT/$name/$client-$case-$shape-$rep dur=$DUR cpu0 cpu1 rps ok errors p99=0
    [[ $rep == warmup ]] && dur=$WARMUP
    local -a cmd=(h2load -t1 -D "$dur" -c "${shape%x*}" -m "${shape#*x}")
    [[ $client == h2load ]] ||
        cmd=("$TERN_BIN" bench -t1 -d "${dur}s" -c "${shape%x*}" --streams "${shape#*x}" -k --json --no-store)
    cpu0=$(server_ticks "${PID[$name]}")
    /usr/bin/time -f '%U %S' -o "$log.time" timeout --foreground -k 5 $((dur + 30)) \
        "${CLIENT_PIN[@]}" "${cmd[@]}" "$@" "$url" >"$log.out" 2>"$log.err" || echo "exit status $?" >>"$log.err"
    cpu1=$(server_ticks "${PID[$name]}")
    kill -0 "${PID[$name]}" 2>/dev/null || bench_banner "$name died during $client $case $shape (see $OUT/$name)"
    [[ $rep == warmup ]] && return 0
    if [[ $client == h2load ]]; then
        rps=$(awk '/^finished in/ { print $4 }' "$log.out")
        read -r ok errors < <(awk '/^requests:/ {
            for (i = 2; i <= NF; i++) {
                if ($i ~ /^succeeded/) ok = $(i - 1)
                if ($i ~ /^(failed|errored|timeout)/) bad += $(i - 1)
            }
            print ok, bad
        }' "$log.out") || true
    else
        read -r rps ok errors p99 < <(python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
print(j["requests_per_s"], j["successes"], sum(j["errors"].values()), j["latency"]["service"]["p99_us"])' "$log.out" 2>/dev/null) || true
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$part" "$mode" "$case" "$shape" "${name%%-*}" \
        "$client" "$rep" "${rps:-0}" "${ok:-0}" "${errors:-0}" "$p99" $((cpu1 - cpu0)) \
        "$(awk '{ printf "%d", ($1 + $2) * 1000 }' "$log.time")" >>"$RUNS"
}

# files_part MODE WORKERS: every server, file, shape and client.
files_part() {
    local mode=$1 workers=$2 s f shape rep i client n=${#SERVER_LIST[@]} clients url
    for s in "${SERVER_LIST[@]}"; do start "$s-$mode" "$s" "$workers"; done
    for f in "${FILES[@]}"; do
        f=${f%%:*}
        for shape in "${SHAPES[@]}"; do
            for s in "${SERVER_LIST[@]}"; do
                ((WARMUP == 0)) || measure files "$mode" "$f" "$shape" "$s-$mode" h2load warmup \
                    "https://127.0.0.1:${PORT[$s-$mode]}/$f.bin"
            done
            for ((rep = 0; rep < REPS; rep++)); do
                # Which client goes first alternates between runs.
                clients=(h2load tern-bench)
                ((rep % 2)) && clients=(tern-bench h2load)
                for ((i = 0; i < n; i++)); do
                    s=${SERVER_LIST[(i + rep) % n]}
                    url=https://127.0.0.1:${PORT[$s-$mode]}/$f.bin
                    bench_log "$mode $f $shape $s (run $((rep + 1)) of $REPS)"
                    for client in "${clients[@]}"; do
                        if [[ $client == h2load ]]; then
                            measure files "$mode" "$f" "$shape" "$s-$mode" "$client" "$rep" "$url"
                        else
                            measure files "$mode" "$f" "$shape" "$s-$mode" "$client" "$rep" "$url" --h2
                        fi
                    done
                done
            done
        done
    done
    for s in "${SERVER_LIST[@]}"; do stop "$s-$mode"; done
}

# The demo site, built as README's first command does, into a copy, and its
# mix.
demo_site() {
    DEMO=$OUT/site
    [[ -d $DEMO ]] && return 0
    cp -r "$ROOT/site" "$DEMO"
    make -s -C "$ROOT/gateway" demo BUILD="$OUT/gateway" DEMO_CGI="$DEMO/cgi-bin" >"$OUT/make-demo.log" 2>&1 ||
        bench_die "make -C gateway demo failed (see $OUT/make-demo.log)"
    MIX=$ROOT/site/demo.mix
}

# mix_part MODE WORKERS: the demo's mix over HTTP/1.1 and over HTTP/2.
mix_part() {
    local mode=$1 workers=$2 name=tern-demo-$1 rep row url
    demo_site
    TERN_ROOT=$DEMO TERN_EXTRA=$'[cgi]\ndirectories = ["/cgi-bin"]\nallow_root = true' CHECK_PATH=/ start "$name" tern "$workers"
    url=https://127.0.0.1:${PORT[$name]}/
    for ((rep = 0; rep < REPS; rep++)); do
        for row in "h1 ${MIX_CONNS}x1" "h2 ${MIX_CONNS}x1" "h2 1x$MIX_CONNS"; do
            local proto=${row% *} shape=${row#* } h2=()
            [[ $proto == h2 ]] && h2=(--h2)
            bench_log "$mode mix $proto $shape (run $((rep + 1)) of $REPS)"
            measure mix "$mode" "$proto" "$shape" "$name" tern-bench "$rep" "$url" --mix "$MIX" "${h2[@]}"
        done
    done
    stop "$name"
}

{
    echo "# bench/h2.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), load before the run $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "$(nproc) CPUs; $(nginx -v 2>&1 | head -n1); $(h2o --version 2>&1 | head -n1); $(h2load --version 2>&1 | head -n1); $(openssl version)"
    echo "$REPS runs of ${DUR}s per cell (medians), warm-up ${WARMUP}s; unpinned: $WORKERS workers each; pinned: 1 worker on CPU 1, the client on CPU 0"
} >"$RESULTS"

for mode in "${MODE_LIST[@]}"; do
    SERVER_PIN=() CLIENT_PIN=() workers=$WORKERS
    case $mode in
        unpinned) ;;
        pinned) SERVER_PIN=(taskset -c 1) CLIENT_PIN=(taskset -c 0) workers=1 ;;
        *) bench_die "unknown mode $mode (unpinned or pinned)" ;;
    esac
    [[ ,$PARTS, == *,files,* ]] && files_part "$mode" "$workers"
    [[ ,$PARTS, == *,mix,* ]] && mix_part "$mode" "$workers"
done

python3 "$ROOT/bench/lib/h2_report.py" "$RUNS" "$HZ" >>"$RESULTS"
cat "$RESULTS"
bench_log "results in $OUT"
