#!/usr/bin/env bash
# bench/static.sh: static-file benchmark of tern against nginx, lighttpd, h2o
# and a minimal C epoll responder, side by side on 127.0.0.1 (issue 2).
#
# For every server (equal worker counts, access logs off, keep-alive limits
# raised) and every file size (1 KiB, 40 KiB, 1 MiB; keep-alive):
#   wrk -tT -cC -dD --latency, R repetitions, the median one reported:
#   requests/s, p99, the server's own CPU time per request (utime+stime of its
#   whole process tree from /proc, before/after each run), requests/s per
#   server core, GiB/s, and the ratio of each tern I/O method to each peer.
# Then, per server: system calls per keep-alive request for the 1 KiB file
# (strace -f -c attached to all its processes and threads while wrk -t1 -c1
# makes sequential requests on one connection; calls minus the server's idle
# rate, divided by the requests wrk completed), idle RSS and RSS with N idle
# keep-alive connections that each made one request (bench/lib/idleconns.c).
# By default the server is pinned to CPU 0 and the load generator to CPU 1.
#
# Usage: bench/static.sh [options]      (each option also has an env variable)
#   -d, --duration S        wrk seconds per run              DUR=10
#   -c, --connections N     wrk connections                  CONNS=64
#   -t, --threads N         wrk threads                      THREADS=1
#   -r, --reps N            repetitions (median reported)    REPS=3
#   -w, --workers N         server workers/threads           WORKERS=2
#   -s, --servers LIST      comma list of nginx,lighttpd,h2o,minimal,
#                           tern-default,tern-sendfile,tern-mmap,tern-read,
#                           tern-uring,tern-uring-io
#                                                            SERVERS=all but
#                                                            the uring ones
#                           (tern-default: no --io, i.e. static.io = "auto"; its
#                           decision is saved as io.json beside its logs;
#                           tern-uring: --model uring, static.io "auto";
#                           tern-uring-io: --model uring --io uring)
#   -z, --sizes LIST        comma list of 1k,40k,1m          SIZES=1k,40k,1m
#       --warmup S          warm-up seconds per size         WARMUP=1
#       --strace-duration S syscall-count run seconds        STRACE_DUR=3
#       --idle-conns N      idle keep-alive connections      IDLE_CONNS=5000
#       --no-pin            do not pin server/wrk to CPUs    PIN=0
#       --skip-build        do not run cargo build           SKIP_BUILD=1
#       --no-strace         skip the syscall count           NO_STRACE=1
#       --no-rss            skip the memory measurements     NO_RSS=1
#   env TERN_TEMPLATE=FILE  tern's config template instead of
#                           bench/peers/tern.toml.tmpl (to compare a setting)
#       --sequential        one server at a time: start, warm up, all its
#                           runs, stop (default: every server up at once and
#                           the runs interleaved, rotating, so that noise
#                           from other work on the machine is shared)
#                                                            SEQUENTIAL=1
#   -h, --help
# Output: tables on stdout; everything (configs, logs, raw wrk/strace output,
# results.json) in bench/out/static-YYYYmmdd-HHMMSS/, results also copied to
# bench/out/static-latest.json.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"
# shellcheck source=bench/lib/servers.sh
source "$ROOT/bench/lib/servers.sh"

DUR=${DUR:-10}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
REPS=${REPS:-3}
WORKERS=${WORKERS:-2}
SERVERS=${SERVERS:-nginx,lighttpd,h2o,minimal,tern-default,tern-sendfile,tern-mmap,tern-read}
SIZES=${SIZES:-1k,40k,1m}
WARMUP=${WARMUP:-1}
STRACE_DUR=${STRACE_DUR:-3}
IDLE_CONNS=${IDLE_CONNS:-5000}
PIN=${PIN:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
NO_STRACE=${NO_STRACE:-0}
NO_RSS=${NO_RSS:-0}
SEQUENTIAL=${SEQUENTIAL:-0}

readonly PACKAGES=(nginx lighttpd h2o wrk strace curl gcc libc6-dev python3 procps iproute2 util-linux)
readonly ALL_SERVERS=(nginx lighttpd h2o minimal tern-default tern-sendfile tern-mmap tern-read tern-uring tern-uring-io)
declare -A SIZE_BYTES=([1k]=1024 [40k]=40960 [1m]=1048576)

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            -z|--sizes) SIZES=$2; shift 2 ;;
            --strace-duration) STRACE_DUR=$2; shift 2 ;;
            --idle-conns) IDLE_CONNS=$2; shift 2 ;;
            --no-strace) NO_STRACE=1; shift ;;
            --no-rss) NO_RSS=1; shift ;;
            --sequential) SEQUENTIAL=1; shift ;;
            *) bench_option "duration connections threads reps workers servers warmup no-pin skip-build" "$@"; shift "$BENCH_SHIFT" ;;
        esac
    done
    local v
    for v in DUR CONNS THREADS REPS WORKERS WARMUP STRACE_DUR IDLE_CONNS; do
        [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
    done
    IFS=, read -r -a SERVER_LIST <<<"$SERVERS"
    IFS=, read -r -a SIZE_LIST <<<"$SIZES"
    local s
    for s in "${SERVER_LIST[@]}"; do
        [[ " ${ALL_SERVERS[*]} " == *" $s "* ]] || bench_die "unknown server '$s' (known: ${ALL_SERVERS[*]})"
    done
    for s in "${SIZE_LIST[@]}"; do
        [[ -n ${SIZE_BYTES[$s]:-} ]] || bench_die "unknown size '$s' (known: ${!SIZE_BYTES[*]})"
    done
}

# ---------------------------------------------------------------- setup

setup() {
    "$ROOT/scripts/ensure-packages.sh" "${PACKAGES[@]}"

    bench_start_run static
    # Enough descriptors for IDLE_CONNS connections, in us and in the servers.
    bench_raise_fd_limit $((IDLE_CONNS + 100)) "$IDLE_CONNS idle connections (lower --idle-conns)"

    # Commands are prefixed with these (never run a shell function in the
    # background: $! would be a subshell, not the program).
    SERVER_CPUS="" CLIENT_CPUS="" SERVER_PIN=() CLIENT_PIN=()
    if [[ $PIN == 1 ]]; then
        if (($(nproc) >= 2)); then
            SERVER_CPUS=0 CLIENT_CPUS=1 SERVER_PIN=(taskset -c 0) CLIENT_PIN=(taskset -c 1)
        else
            bench_log "only $(nproc) CPU: not pinning"
            PIN=0
        fi
    fi

    bench_log "building the helpers (gcc -O2)"
    gcc -O2 -pthread -o "$OUT/responder" "$ROOT/bench/minimal/responder.c"
    gcc -O2 -o "$OUT/idleconns" "$ROOT/bench/lib/idleconns.c"

    make_docroot
    write_meta
}


build_tern() {
    local s want=0
    TERN_OK=1
    for s in "${SERVER_LIST[@]}"; do [[ $s == tern-* ]] && want=1; done
    ((want)) || return 0
    bench_build_tern
}

write_meta() {
    local meta=$OUT/meta.tsv
    {
        printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'command\t%s\n' "$COMMAND_LINE"
        printf 'git_commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        printf 'nproc\t%s\n' "$(nproc)"
        printf 'kernel\t%s\n' "$(uname -r)"
        printf 'cpu_model\t%s\n' "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
        printf 'mem_total\t%s\n' "$(awk '/^MemTotal/ {print $2 " kB"}' /proc/meminfo)"
        printf 'nginx\t%s\n' "$(nginx -v 2>&1 | head -n1)"
        printf 'lighttpd\t%s\n' "$(lighttpd -v 2>&1 | head -n1)"
        printf 'h2o\t%s\n' "$(h2o --version 2>&1 | head -n1)"
        printf 'wrk\t%s\n' "$(wrk --version 2>&1 | head -n1 | sed 's/ Copyright.*//')"
        printf 'strace\t%s\n' "$(strace -V 2>&1 | head -n1)"
        printf 'gcc\t%s\n' "$(gcc --version | head -n1)"
        printf 'loadavg_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
        printf 'duration_s\t%s\n' "$DUR"
        printf 'connections\t%s\n' "$CONNS"
        printf 'threads\t%s\n' "$THREADS"
        printf 'reps\t%s\n' "$REPS"
        printf 'workers\t%s\n' "$WORKERS"
        printf 'warmup_s\t%s\n' "$WARMUP"
        printf 'strace_duration_s\t%s\n' "$STRACE_DUR"
        printf 'idle_conns\t%s\n' "$IDLE_CONNS"
        printf 'order\t%s\n' "$( ((SEQUENTIAL)) && echo "sequential: one server at a time" || echo "interleaved: all servers up, one run each per round, order rotated per round")"
        printf 'pinning\t%s\n' "$( ((PIN)) && echo "server on CPU $SERVER_CPUS, load generator on CPU $CLIENT_CPUS" || echo none)"
        printf 'clk_tck\t%s\n' "$(getconf CLK_TCK)"
    } >"$meta"
}

# ---------------------------------------------------------------- measuring

# Sets KIDS_MS to the user+system CPU, in milliseconds, of this shell's
# reaped children (so wrk's, once it ended). Not in $(...): a subshell's own
# children are not ours.
children_cpu_ms() {
    local tf=$OUT/.times
    times >"$tf"
    KIDS_MS=$(awk 'NR == 2 {
        t = 0
        for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60000 + a[2] * 1000 }
        printf "%d\n", t
    }' "$tf")
}

# One wrk run with the server's CPU time around it; appends a JSON line.
wrk_run() {
    local name=$1 size=$2 rep=$3 dur=$4 conns=$5 threads=$6
    local file=$RUNDIR/wrk-$size-$rep.txt
    local cpu0 cpu1 busy0 busy1 kid0 kid1 t0 t1
    children_cpu_ms; kid0=$KIDS_MS; busy0=$(system_busy_ticks); cpu0=$(tree_cpu_ticks "$SRV_PID")
    t0=$(date +%s.%N)
    timeout -k 5 $((dur + 30)) "${CLIENT_PIN[@]}" wrk -t"$threads" -c"$conns" -d"${dur}s" --timeout 5s --latency \
        "http://127.0.0.1:$PORT/$size.bin" >"$file" 2>&1 || echo "wrk exited with $?" >>"$file"
    t1=$(date +%s.%N)
    cpu1=$(tree_cpu_ticks "$SRV_PID"); busy1=$(system_busy_ticks); children_cpu_ms; kid1=$KIDS_MS
    kill -0 "$SRV_PID" 2>/dev/null || bench_banner "$name died during $size rep $rep (see $RUNDIR)"
    [[ $rep == warmup ]] && return 0
    printf '{"kind":"load","server":"%s","size":"%s","bytes":%d,"rep":%s,"duration_s":%s,"connections":%s,"threads":%s,"wrk_file":"%s","server_cpu_ticks":%d,"wall_s":%s,"system_busy_ticks":%d,"client_cpu_ms":%d}\n' \
        "$name" "$size" "${SIZE_BYTES[$size]}" "$rep" "$dur" "$conns" "$threads" "$file" \
        $((cpu1 - cpu0)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')" \
        $((busy1 - busy0)) $((kid1 - kid0)) >>"$RUNS"
}

load_phase() {
    local name=$1 size rep
    for size in "${SIZE_LIST[@]}"; do
        [[ $name == minimal && $size != 1k ]] && continue
        bench_log "$name: $size warm-up ${WARMUP}s, then $REPS x ${DUR}s"
        wrk_run "$name" "$size" warmup "$WARMUP" "$CONNS" "$THREADS"
        for rep in $(seq 1 "$REPS"); do
            wrk_run "$name" "$size" "$rep" "$DUR" "$CONNS" "$THREADS"
            bench_log "$name: $size rep $rep: $(awk '/^Requests\/sec/ {print $2 " req/s"}' "$RUNDIR/wrk-$size-$rep.txt")"
        done
    done
}

# strace_session OUTFILE CMD...: strace -f -c attached to every process of the
# server (-f takes in all their threads) while CMD runs; sets TRACED_S to the
# seconds strace was attached. CMD's exit status is ignored.
strace_session() {
    local sfile=$1; shift
    local -a args=()
    local pid attached t0 t1 spid n=0
    for pid in $(proc_tree "$SRV_PID"); do args+=(-p "$pid"); n=$((n + 1)); done
    strace -f -c -o "$sfile" "${args[@]}" 2>"$sfile.err" &
    spid=$!
    BENCH_PIDS+=("$spid")
    for _ in $(seq 1 100); do   # until every process reports "attached"
        attached=$(grep -c 'attached' "$sfile.err" 2>/dev/null) || true
        ((${attached:-0} >= n)) && break
        sleep 0.05
    done
    t0=$(date +%s.%N)
    "$@" || true
    kill -INT "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    t1=$(date +%s.%N)
    forget_pid "$spid"
    TRACED_S=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
}

# System calls per keep-alive request for 1 KiB: first the server's idle rate
# (strace attached, no traffic, 2 s), then strace attached while wrk -t1 -c1
# makes sequential requests on one connection for STRACE_DUR seconds.
# Reported: (calls - idle rate * traced seconds) / requests wrk completed,
# and the raw calls / requests.
strace_phase() {
    local name=$1 ifile=$RUNDIR/strace-idle.txt sfile=$RUNDIR/strace-1k.txt wfile=$RUNDIR/wrk-strace-1k.txt
    local idle_s
    strace_session "$ifile" sleep 2
    idle_s=$TRACED_S
    strace_session "$sfile" timeout -k 5 $((STRACE_DUR + 30)) "${CLIENT_PIN[@]}" \
        wrk -t1 -c1 -d"${STRACE_DUR}s" --timeout 5s "http://127.0.0.1:$PORT/1k.bin" >"$wfile" 2>&1
    if ! grep -q 'requests in' "$wfile" || grep -q 'unable to connect' "$wfile" || ! kill -0 "$SRV_PID" 2>/dev/null; then
        bench_banner "$name: the syscall-count run failed (server alive: $(kill -0 "$SRV_PID" 2>/dev/null && echo yes || echo NO))" \
                     "$(head -n 3 "$wfile" | tr '\n' ' ')"
        echo "$name: syscall count failed: $(head -n 1 "$wfile")" >>"$SKIPS"
    fi
    printf '{"kind":"strace","server":"%s","strace_file":"%s","idle_strace_file":"%s","idle_traced_s":%s,"traced_s":%s,"wrk_file":"%s","method":"strace -f -c on all server processes (all threads) while wrk -t1 -c1 -d%ss makes sequential keep-alive requests; (calls - idle calls/s x traced s) / requests wrk completed"}\n' \
        "$name" "$sfile" "$ifile" "$idle_s" "$TRACED_S" "$wfile" "$STRACE_DUR" >>"$RUNS"
}

# Idle RSS (after start + one request per size) and RSS with IDLE_CONNS idle
# keep-alive connections that each made one request.
rss_phase() {
    local name=$1 idle conns cfile=$RUNDIR/idleconns.txt
    local -a I C R O
    sleep 0.5
    idle=$(tree_mem_kib "$SRV_PID")
    "${CLIENT_PIN[@]}" "$OUT/idleconns" -a 127.0.0.1 -p "$PORT" -n "$IDLE_CONNS" -u /1k.bin -H 60 \
        >"$cfile" 2>"$RUNDIR/idleconns.err" &
    local cpid=$!
    BENCH_PIDS+=("$cpid")
    for _ in $(seq 1 600); do
        grep -q '^ready' "$cfile" 2>/dev/null && break
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.1
    done
    sleep 1
    conns=$(tree_mem_kib "$SRV_PID")
    kill -USR1 "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
    forget_pid "$cpid"
    local ready open
    ready=$(awk '/^ready/ {print $2, $3}' "$cfile"); ready=${ready:-0 $IDLE_CONNS}
    open=$(awk '/^open/ {print $2, $3}' "$cfile"); open=${open:-0 0}
    [[ -s $RUNDIR/idleconns.err ]] && bench_log "$name idle connections: $(head -n1 "$RUNDIR/idleconns.err")"
    read -r -a I <<<"$idle"; read -r -a C <<<"$conns"; read -r -a R <<<"$ready"; read -r -a O <<<"$open"
    printf '{"kind":"rss","server":"%s","idle_rss_kib":%d,"idle_pss_kib":%d,"procs":%d,"conns_wanted":%d,"conns_opened":%d,"conns_failed":%d,"conns_still_open":%d,"conns_closed_by_server":%d,"conns_rss_kib":%d,"conns_pss_kib":%d}\n' \
        "$name" "${I[0]}" "${I[1]}" "${I[2]}" "$IDLE_CONNS" "${R[0]}" "${R[1]}" "${O[0]}" "${O[1]}" "${C[0]}" "${C[1]}" >>"$RUNS"
}

bench_server() {
    local name=$1
    bench_log "=== $name"
    if [[ $NO_RSS != 1 ]]; then
        start_checked "$name" mem || return 0
        rss_phase "$name"
        stop_server
    fi
    start_checked "$name" load || return 0
    load_phase "$name"
    [[ $NO_STRACE == 1 ]] || strace_phase "$name"
    stop_server
}

# ---- interleaved order (the default): on a shared machine, noise from other
# work then falls on every server alike instead of on whichever ran when it
# happened.
declare -A S_PID=() S_PORT=() S_DIR=()
remember_server() { S_PID[$1]=$SRV_PID; S_PORT[$1]=$PORT; S_DIR[$1]=$RUNDIR; }
use_server() { SRV_PID=${S_PID[$1]}; PORT=${S_PORT[$1]}; RUNDIR=${S_DIR[$1]}; }

# Memory per server, each alone and fresh; then every server up at once (idle
# ones cost nothing), and for each size: a warm-up of each, then REPS rounds
# of one run per server, the order rotated each round; then the syscall
# counts, one server at a time.
run_interleaved() {
    local name size rep i n
    local -a up=() here=()
    if [[ $NO_RSS != 1 ]]; then
        for name in "${SERVER_LIST[@]}"; do
            bench_log "=== $name: memory"
            start_checked "$name" mem || continue
            rss_phase "$name"
            stop_server
        done
    fi
    bench_log "=== starting every server for the load runs"
    for name in "${SERVER_LIST[@]}"; do
        start_checked "$name" load || continue
        remember_server "$name"
        up+=("$name")
    done
    for size in "${SIZE_LIST[@]}"; do
        here=()
        for name in "${up[@]}"; do [[ $name == minimal && $size != 1k ]] || here+=("$name"); done
        n=${#here[@]}
        ((n > 0)) || continue
        bench_log "$size: warm-up ${WARMUP}s each, then $REPS rounds of ${DUR}s runs: ${here[*]}"
        for name in "${here[@]}"; do
            use_server "$name"
            wrk_run "$name" "$size" warmup "$WARMUP" "$CONNS" "$THREADS"
        done
        for rep in $(seq 1 "$REPS"); do
            for ((i = 0; i < n; i++)); do
                name=${here[(i + rep - 1) % n]}
                use_server "$name"
                wrk_run "$name" "$size" "$rep" "$DUR" "$CONNS" "$THREADS"
                bench_log "$size round $rep: $name $(awk '/^Requests\/sec/ {print $2 " req/s"}' "$RUNDIR/wrk-$size-$rep.txt")"
            done
        done
    done
    for name in "${up[@]}"; do
        use_server "$name"
        if [[ $NO_STRACE != 1 ]]; then
            bench_log "=== $name: syscalls per request"
            strace_phase "$name"
        fi
        stop_server
    done
}

main() {
    COMMAND_LINE="bench/static.sh${*:+ $*}"
    parse_args "$@"
    trap stop_all EXIT
    trap 'bench_log "failed (status $?) at line $LINENO: $BASH_COMMAND"' ERR
    trap 'bench_log "interrupted by a signal; stopping the servers"; exit 130' INT TERM
    setup
    build_tern
    local start=$SECONDS name
    if [[ $SEQUENTIAL == 1 ]]; then
        for name in "${SERVER_LIST[@]}"; do bench_server "$name"; done
    else
        run_interleaved
    fi
    printf 'loadavg_end\t%s\nelapsed_s\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" $((SECONDS - start)) >>"$OUT/meta.tsv"
    python3 "$ROOT/bench/lib/static_report.py" "$OUT" | tee "$OUT/report.txt"
    cp "$OUT/results.json" "$ROOT/bench/out/static-latest.json"
    if [[ -s $SKIPS ]]; then
        bench_banner "Some rows were SKIPPED:" "$(cat "$SKIPS")"
    fi
    bench_log "raw data and results.json in $OUT"
}

main "$@"
