#!/usr/bin/env bash
# bench/cpu_per_response.sh: CPU time per response at a fixed request rate,
# tern (event and uring) beside nginx, lighttpd, h2o and the minimal C
# responder (the floor), one worker each (issue 34).
#
# Every server runs alone on CPU 0 with one worker (all are up at once, idle
# but for the one measured); `tern bench -R RATE` sends an open-loop load
# from CPU 1 at a rate every server carries, over CONNS keep-alive
# connections. The figure is the CPU time of the server's whole process tree
# — every thread's sum_exec_runtime, from /proc/PID/task/*/schedstat, before
# and after the run — divided by the responses that came back; ROUNDS
# interleaved rounds (every server once per case per round, the order
# rotated), medians reported. Both the servers and the load generator run at
# nice -19, so other programs on this shared machine take little of their
# CPUs; the time a server's threads waited for a CPU (schedstat's run delay)
# is reported beside each figure as the check. The load average before the
# run is recorded.
#
# Then, per server, system calls per response at CONNS connections, 1 KiB:
# `perf stat -e 'syscalls:sys_enter_*'` on every thread of the server while
# `tern bench` runs at the 1 KiB case's rate, and again closed-loop
# (saturation); and the saturation throughput itself (closed loop, CONNS
# connections, the same pinning), per size, medians of ROUNDS.
#
# Usage: bench/cpu_per_response.sh [options]   (each also an env variable)
#   -d, --duration S     seconds per measured run             DUR=5
#   -r, --reps N         rounds (medians of N)                REPS=5
#   -c, --connections N  connections of the load              CONNS=64
#   -s, --servers LIST   comma list of tern-default,tern-uring,tern-uring-io,
#                        tern-uring-batch,nginx,lighttpd,h2o,minimal
#                          SERVERS=tern-default,tern-uring,tern-uring-batch,
#                                  nginx,lighttpd,h2o,minimal
#                        (tern-uring-batch: server.batch_wait = BATCH_WAIT,
#                        default "200us"; see bench/lib/servers.sh)
#       --cases LIST     size:rate pairs           CASES=1k:20000,40k:12000,1m:1200
#       --warmup S       warm-up seconds per server and case  WARMUP=1
#       --no-syscalls    skip the system-call counts          NO_SYSCALLS=1
#       --no-saturation  skip the saturation runs             NO_SATURATION=1
#       --skip-build     do not run cargo build               SKIP_BUILD=1
#   env TERN_TEMPLATE=FILE  tern's config template (bench/peers/tern.toml.tmpl)
#   -h, --help
# The minimal responder stands for each size as minimal, minimal-40k,
# minimal-1m (a body of that size from memory, whatever is asked).
# Output: tables on stdout; everything (configs, logs, runs.jsonl, the
# perf output) in bench/out/cpu_per_response-YYYYmmdd-HHMMSS/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"
# shellcheck source=bench/lib/servers.sh
source "$ROOT/bench/lib/servers.sh"

DUR=${DUR:-5}
REPS=${REPS:-5}
CONNS=${CONNS:-64}
SERVERS=${SERVERS:-tern-default,tern-uring,tern-uring-batch,nginx,lighttpd,h2o,minimal}
CASES=${CASES:-1k:20000,40k:12000,1m:1200}
WARMUP=${WARMUP:-1}
NO_SYSCALLS=${NO_SYSCALLS:-0}
NO_SATURATION=${NO_SATURATION:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
WORKERS=1
PIN=1

readonly PACKAGES=(nginx lighttpd h2o curl gcc libc6-dev python3 procps iproute2 util-linux linux-perf)
readonly ALL_SERVERS=(tern-default tern-uring tern-uring-io tern-uring-batch nginx lighttpd h2o minimal)
declare -A SIZE_BYTES=([1k]=1024 [40k]=40960 [1m]=1048576)

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            --cases) CASES=$2; shift 2 ;;
            --no-syscalls) NO_SYSCALLS=1; shift ;;
            --no-saturation) NO_SATURATION=1; shift ;;
            *) bench_option "duration connections reps servers warmup skip-build" "$@"; shift "$BENCH_SHIFT" ;;
        esac
    done
    local v s
    for v in DUR REPS CONNS WARMUP; do
        [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
    done
    IFS=, read -r -a SERVER_LIST <<<"$SERVERS"
    IFS=, read -r -a CASE_LIST <<<"$CASES"
    for s in "${SERVER_LIST[@]}"; do
        [[ " ${ALL_SERVERS[*]} " == *" $s "* ]] || bench_die "unknown server '$s' (known: ${ALL_SERVERS[*]})"
    done
    SIZE_LIST=()
    for s in "${CASE_LIST[@]}"; do
        [[ $s =~ ^([a-z0-9]+):([0-9]+)$ && -n ${SIZE_BYTES[${BASH_REMATCH[1]}]:-} ]] ||
            bench_die "a case is SIZE:RATE with SIZE one of ${!SIZE_BYTES[*]} (got '$s')"
        SIZE_LIST+=("${BASH_REMATCH[1]}")
    done
}

setup() {
    "$ROOT/scripts/ensure-packages.sh" "${PACKAGES[@]}"
    (($(nproc) >= 2)) || bench_die "needs 2 CPUs: the server on CPU 0, the load on CPU 1"
    bench_start_run cpu_per_response
    bench_raise_fd_limit 1024 "the servers"
    # nice -19: on a shared machine, other programs then take little of the
    # two CPUs while a server and the load run (see the run delay column).
    SERVER_CPUS=0 SERVER_PIN=(nice -n -19 taskset -c 0) CLIENT_PIN=(nice -n -19 taskset -c 1)
    gcc -O2 -pthread -o "$OUT/responder" "$ROOT/bench/minimal/responder.c"
    make_docroot
    TERN_OK=1
    bench_build_tern
    ((TERN_OK)) || bench_die "tern is needed as the load generator (tern bench)"
    {
        printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'command\t%s\n' "$COMMAND_LINE"
        printf 'git_commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        printf 'kernel\t%s\n' "$(uname -r)"
        printf 'cpu_model\t%s\n' "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
        printf 'loadavg_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
        printf 'nginx\t%s\n' "$(nginx -v 2>&1 | head -n1)"
        printf 'lighttpd\t%s\n' "$(lighttpd -v 2>&1 | head -n1)"
        printf 'h2o\t%s\n' "$(h2o --version 2>&1 | head -n1)"
        printf 'cases\t%s\n' "$CASES"
        printf 'duration_s\t%s\nrounds\t%s\nconnections\t%s\nworkers\t1\n' "$DUR" "$REPS" "$CONNS"
    } >"$OUT/meta.tsv"
}

# Every server of the list that stands for SIZE (the minimal responder has
# one per size).
servers_for() {
    local size=$1 name
    for name in "${UP[@]}"; do
        case $name in
            minimal) [[ $size == 1k ]] && echo "$name" ;;
            minimal-*) [[ $name == "minimal-$size" ]] && echo "$name" ;;
            *) echo "$name" ;;
        esac
    done
}

declare -A S_PID=() S_PORT=() S_DIR=()
UP=()
start_all() {
    local name size
    local -a names=()
    for name in "${SERVER_LIST[@]}"; do
        if [[ $name == minimal ]]; then
            for size in "${SIZE_LIST[@]}"; do
                if [[ $size == 1k ]]; then names+=(minimal); else names+=("minimal-$size"); fi
            done
        else
            names+=("$name")
        fi
    done
    for name in "${names[@]}"; do
        start_checked "$name" load || continue
        S_PID[$name]=$SRV_PID S_PORT[$name]=$PORT S_DIR[$name]=$RUNDIR
        UP+=("$name")
    done
}

# tree_sched PID: "RUN_NS DELAY_NS" summed over every thread of the tree.
tree_sched() {
    local pid f run=0 delay=0 a b _
    for pid in $(proc_tree "$1"); do
        for f in /proc/"$pid"/task/*/schedstat; do
            read -r a b _ <"$f" 2>/dev/null || continue
            run=$((run + a)) delay=$((delay + b))
        done
    done
    echo "$run $delay"
}

# measure NAME SIZE RATE ROUND: one run of `tern bench` (RATE 0: closed
# loop) against NAME; appends a JSON line to runs.jsonl.
measure() {
    local name=$1 size=$2 rate=$3 round=$4 dur=${5:-$DUR}
    local pid=${S_PID[$name]} port=${S_PORT[$name]} out=${S_DIR[$name]}/bench-$size-$rate-$round.txt
    local -a load=()
    ((rate > 0)) && load=(-R "$rate")
    local r0 d0 r1 d1
    read -r r0 d0 < <(tree_sched "$pid")
    timeout -k 5 $((dur + 30)) "${CLIENT_PIN[@]}" "$TERN_BIN" bench "${load[@]}" -c "$CONNS" -t 1 -d "${dur}s" \
        "http://127.0.0.1:$port/$size.bin" >"$out" 2>&1 || echo "tern bench exited with $?" >>"$out"
    read -r r1 d1 < <(tree_sched "$pid")
    kill -0 "$pid" 2>/dev/null || bench_banner "$name died during $size at $rate/s (see ${S_DIR[$name]})"
    [[ $round == warmup ]] && return 0
    printf '{"server":"%s","size":"%s","rate":%d,"round":"%s","bench_file":"%s","run_ns":%d,"delay_ns":%d}\n' \
        "$name" "$size" "$rate" "$round" "$out" $((r1 - r0)) $((d1 - d0)) >>"$RUNS"
}

# ROUNDS interleaved rounds of every case, each server once per round.
cpu_phase() {
    local round c size rate i n name
    local -a here
    for c in "${CASE_LIST[@]}"; do
        size=${c%%:*} rate=${c##*:}
        mapfile -t here < <(servers_for "$size")
        for name in "${here[@]}"; do measure "$name" "$size" "$rate" warmup "$WARMUP"; done
    done
    for round in $(seq 1 "$REPS"); do
        for c in "${CASE_LIST[@]}"; do
            size=${c%%:*} rate=${c##*:}
            mapfile -t here < <(servers_for "$size")
            n=${#here[@]}
            bench_log "round $round: $size at $rate/s (load $(cut -d' ' -f1 /proc/loadavg))"
            for i in $(seq 0 $((n - 1))); do
                measure "${here[$(((i + round) % n))]}" "$size" "$rate" "$round"
            done
        done
    done
}

# Saturation: closed loop, CONNS connections, per size, ROUNDS rounds.
saturation_phase() {
    local round size i n
    local -a here
    for round in $(seq 1 "$REPS"); do
        for size in "${SIZE_LIST[@]}"; do
            mapfile -t here < <(servers_for "$size")
            n=${#here[@]}
            bench_log "saturation round $round: $size"
            for i in $(seq 0 $((n - 1))); do
                measure "${here[$(((i + round) % n))]}" "$size" 0 "$round"
            done
        done
    done
}

# System calls per response: perf counts every syscall entry of every
# thread of the server while `tern bench` runs (1 KiB, at the 1 KiB case's
# rate, then closed loop).
syscall_phase() {
    local name rate r pid file out tids
    rate=$(printf '%s\n' "${CASE_LIST[@]}" | awk -F: '$1 == "1k" {print $2}')
    for name in $(servers_for 1k); do
        for r in ${rate:-20000} 0; do
            pid=${S_PID[$name]}
            file=${S_DIR[$name]}/syscalls-1k-$r.txt
            out=${S_DIR[$name]}/bench-syscalls-1k-$r.txt
            tids=$(tree_tids "$pid" | paste -sd,)
            local -a load=()
            ((r > 0)) && load=(-R "$r")
            perf stat -e 'syscalls:sys_enter_*' -t "$tids" -o "$file" -- \
                "${CLIENT_PIN[@]}" "$TERN_BIN" bench "${load[@]}" -c "$CONNS" -t 1 -d "${DUR}s" \
                "http://127.0.0.1:${S_PORT[$name]}/1k.bin" >"$out" 2>&1 || true
            printf '{"server":"%s","size":"1k","rate":%d,"round":"syscalls","bench_file":"%s","perf_file":"%s"}\n' \
                "$name" "$r" "$out" "$file" >>"$RUNS"
        done
    done
}

main() {
    COMMAND_LINE="$0 $*"
    parse_args "$@"
    setup
    trap stop_all EXIT
    start_all
    ((${#UP[@]} > 0)) || bench_die "no server started"
    cpu_phase
    ((NO_SYSCALLS)) || syscall_phase
    ((NO_SATURATION)) || saturation_phase
    stop_all
    printf 'loadavg_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.tsv"
    python3 "$ROOT/bench/lib/cpu_report.py" "$OUT" | tee "$OUT/report.md"
}

main "$@"
