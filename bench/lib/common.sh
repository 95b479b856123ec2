# shellcheck shell=bash
# Helpers shared by the benchmark scripts under bench/: process trees, their CPU
# time and memory, free ports, readiness, and stopping what we started.
# Source it; it defines functions only (and the array BENCH_PIDS).

# PIDs of every process the caller started and must stop on exit.
BENCH_PIDS=()

bench_log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
bench_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Loud, multi-line notice that survives a scroll-back skim.
bench_banner() {
    local line='!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
    printf '\n%s\n' "$line" >&2
    local msg
    for msg in "$@"; do printf '!!! %s\n' "$msg" >&2; done
    printf '%s\n\n' "$line" >&2
}

# proc_tree ROOT_PID: ROOT_PID and all its descendants, one per line.
proc_tree() {
    local root=$1
    [[ -d /proc/$root ]] || return 0
    ps -e -o pid=,ppid= | awk -v root="$root" '
        { kids[$2] = kids[$2] " " $1 }
        END {
            queue[1] = root; n = 1; i = 1
            while (i <= n) {
                p = queue[i++]; print p
                m = split(kids[p], k, " ")
                for (j = 1; j <= m; j++) queue[++n] = k[j]
            }
        }'
}

# tree_tids ROOT_PID: every thread id of every process in the tree.
tree_tids() {
    local pid t
    for pid in $(proc_tree "$1"); do
        for t in /proc/"$pid"/task/*; do
            [[ -d $t ]] && echo "${t##*/}"
        done
    done
}

# tree_cpu_ticks ROOT_PID: utime+stime (clock ticks) summed over the process
# tree. A process's /proc/PID/stat counts all of its threads, live and exited.
tree_cpu_ticks() {
    local total=0 pid stat
    local -a f
    for pid in $(proc_tree "$1"); do
        stat=$(cat /proc/"$pid"/stat 2>/dev/null) || continue
        stat=${stat##*) }            # fields from 3 on; comm may hold spaces
        read -r -a f <<<"$stat"
        total=$((total + f[11] + f[12]))   # fields 14 (utime) and 15 (stime)
    done
    echo "$total"
}

# tree_mem_kib ROOT_PID: "RSS_KIB PSS_KIB NPROCS" summed over the tree
# (VmRSS from status, Pss from smaps_rollup).
tree_mem_kib() {
    local rss=0 pss=0 n=0 pid v
    for pid in $(proc_tree "$1"); do
        v=$(awk '/^VmRSS:/ {print $2}' /proc/"$pid"/status 2>/dev/null) || continue
        [[ -n $v ]] || continue
        rss=$((rss + v)); n=$((n + 1))
        v=$(awk '/^Pss:/ {print $2}' /proc/"$pid"/smaps_rollup 2>/dev/null) || v=0
        pss=$((pss + ${v:-0}))
    done
    echo "$rss $pss $n"
}

# system_busy_ticks: CPU ticks (all CPUs) spent not idle since boot.
system_busy_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# bench_say TEXT: prints TEXT and appends it to $RESULTS.
bench_say() {
    echo "$*" | tee -a "$RESULTS"
}

# bench_machine_state: says the machine's load before a part (load average,
# and how busy all CPUs were over one second), into $RESULTS.
bench_machine_state() {
    local before after hz
    hz=$(getconf CLK_TCK)
    bench_say "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(uptime -p)"
    before=$(system_busy_ticks)
    sleep 1
    after=$(system_busy_ticks)
    bench_say "CPU busy over 1 s before the part (all CPUs, everyone's): $(((after - before) * 100 / hz))% of $(nproc)00%"
}

# tern_conf FILE PORT DOCROOT WORKERS [MORE]: writes FILE, a tern
# configuration for a benchmark: a plain address on PORT, DOCROOT, WORKERS,
# no access log, connections kept as long as their clients keep them; MORE
# goes last.
tern_conf() {
    cat >"$1" <<EOF
[server]
listen = ["127.0.0.1:$2"]
root = "$3"
workers = $4
max_connections = 4096
[limits]
keepalive_requests = 0
[timeouts]
keepalive = "300s"
[log]
access = "off"
${5:-}
EOF
}

# free_port: a TCP port on 127.0.0.1 nobody listens on (below the ephemeral range).
free_port() {
    local port used tries
    used=$(ss -Hltn 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }')
    for tries in $(seq 1 200); do
        port=$((20000 + RANDOM % 12000))
        grep -qx "$port" <<<"$used" || { echo "$port"; return 0; }
    done
    bench_die "no free port found after $tries tries"
}

# wait_http URL PID TIMEOUT_S: wait until URL answers 200 while PID lives.
wait_http() {
    local url=$1 pid=$2 code deadline=$((SECONDS + $3))
    while ((SECONDS < deadline)); do
        kill -0 "$pid" 2>/dev/null || return 1
        code=$(curl -s -o /dev/null -m 1 -w '%{http_code}' "$url" 2>/dev/null) || code=000
        [[ $code == 200 ]] && return 0
        sleep 0.1
    done
    return 1
}

# wait_calibrated BASE_URL OUTFILE: wait until tern's start-up calibration
# (static.io "auto") has decided; OUTFILE gets the status page (JSON). It
# first lets the calibration run (about 250 ms), then asks with curl alone
# every 0.3 s: measured 2026-11-27 (server pinned to CPU 0), six start-ups
# polled every 0.1 s by curl and python3 during the calibration chose mmap
# for the <= 256 KiB class four times, six left alone chose sendfile six
# times — the sendfile that serves 40 KiB fastest in bench/static.sh.
wait_calibrated() {
    local i
    sleep 0.5
    for i in $(seq 1 60); do
        curl -s -m 2 "$1/_tern/status" >"$2" 2>/dev/null && ! grep -q '"source": *"calibrating"' "$2" && return 0
        sleep 0.3
    done
    return 1
}

# stop_tree ROOT_PID: SIGTERM the root, wait up to 5 s for the whole tree to
# go, then SIGKILL whatever is left. Only ever touches that tree.
stop_tree() {
    local root=$1 pid
    local -a pids
    mapfile -t pids < <(proc_tree "$root")
    [[ ${#pids[@]} -gt 0 ]] || return 0
    kill -TERM "$root" 2>/dev/null || true
    for _ in $(seq 1 50); do
        local alive=0
        for pid in "${pids[@]}"; do
            [[ -d /proc/$pid ]] && [[ $(awk '{print $3}' /proc/"$pid"/stat 2>/dev/null) != Z ]] && alive=1
        done
        ((alive)) || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait "$root" 2>/dev/null || true
}

# forget_pid PID: drop PID from BENCH_PIDS (once it has been stopped).
forget_pid() {
    local keep=() pid
    for pid in "${BENCH_PIDS[@]}"; do [[ $pid == "$1" ]] || keep+=("$pid"); done
    BENCH_PIDS=("${keep[@]}")
}

# Stop everything registered in BENCH_PIDS (meant for an EXIT trap).
stop_all() {
    local pid
    for pid in "${BENCH_PIDS[@]}"; do
        if [[ -d /proc/$pid ]]; then stop_tree "$pid"; fi
    done
    BENCH_PIDS=()
}

# bench_build_tern: builds tern in release mode (unless SKIP_BUILD=1) and sets
# TERN_BIN and TERN_OK (1, or 0 after a loud banner and a line in $SKIPS
# when the build fails or the binary is missing). Needs ROOT, OUT, SKIPS.
bench_build_tern() {
    TERN_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/tern
    TERN_OK=1
    if [[ ${SKIP_BUILD:-0} != 1 ]]; then
        bench_log "cargo build --release -p tern (log: $OUT/cargo-build.log)"
        if ! (cd "$ROOT" && cargo build --release -p tern) >"$OUT/cargo-build.log" 2>&1; then
            tail -n 15 "$OUT/cargo-build.log" >&2
            bench_banner "cargo build --release -p tern FAILED: tern is SKIPPED." "See $OUT/cargo-build.log"
            echo "tern: cargo build failed" >>"$SKIPS"
            TERN_OK=0
        fi
    fi
    if ((TERN_OK)) && [[ ! -x $TERN_BIN ]]; then
        bench_banner "$TERN_BIN does not exist: tern is SKIPPED."
        echo "tern: no binary at $TERN_BIN" >>"$SKIPS"
        TERN_OK=0
    fi
}

# bench_start_run NAME: a fresh output directory bench/out/NAME-<time> with
# empty runs.jsonl and skipped.txt; sets OUT, RUNS and SKIPS. Needs ROOT.
bench_start_run() {
    OUT=$ROOT/bench/out/$1-$(date +%Y%m%d-%H%M%S)
    mkdir -p "$OUT"
    RUNS=$OUT/runs.jsonl
    SKIPS=$OUT/skipped.txt
    : >"$RUNS"
    : >"$SKIPS"
}

# bench_raise_fd_limit NEEDED WHAT: raises the open-file limit to the hard
# limit and sets MAXFDS (capped at 65536); dies, naming WHAT, when it is
# below NEEDED.
bench_raise_fd_limit() {
    ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    MAXFDS=$(ulimit -n)
    [[ $MAXFDS == unlimited ]] && MAXFDS=1048576
    ((MAXFDS > 65536)) && MAXFDS=65536
    ((MAXFDS >= $1)) || bench_die "open-file limit $MAXFDS is too low for $2"
}

# bench_usage [STATUS]: the running script's header comment (line 2 up to
# `set -euo`) as its help: on stdout for STATUS 0, else on stderr; exits STATUS.
bench_usage() {
    local text
    text=$(sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//')
    if [[ ${1:-0} == 0 ]]; then echo "$text"; else echo "$text" >&2; fi
    exit "${1:-0}"
}

# bench_option NAMES ARGS...: takes the first of ARGS when it is one of the
# options the load scripts share and NAMES (a space-separated list of their
# long names) accepts, setting its variable: --duration/-d DUR,
# --connections/-c CONNS, --threads/-t THREADS, --reps/-r REPS,
# --workers/-w WORKERS, --servers/-s SERVERS, --warmup WARMUP, --pin and
# --no-pin (PIN), --skip-build (SKIP_BUILD); -h/--help always. Sets
# BENCH_SHIFT to the words it took. Anything else: the help on stderr, exit 2.
bench_option() {
    local names=" $1 " long
    shift
    case $1 in
        -h|--help) bench_usage 0 ;;
        -d) long=duration ;; -c) long=connections ;; -t) long=threads ;;
        -r) long=reps ;; -w) long=workers ;; -s) long=servers ;;
        --*) long=${1#--} ;;
        *) long= ;;
    esac
    if [[ -z $long || $names != *" $long "* ]]; then
        echo "unknown option: $1" >&2
        bench_usage 2
    fi
    BENCH_SHIFT=2
    case $long in
        duration) DUR=${2:?$1 needs a value} ;;
        connections) CONNS=${2:?$1 needs a value} ;;
        threads) THREADS=${2:?$1 needs a value} ;;
        reps) REPS=${2:?$1 needs a value} ;;
        workers) WORKERS=${2:?$1 needs a value} ;;
        servers) SERVERS=${2:?$1 needs a value} ;;
        warmup) WARMUP=${2:?$1 needs a value} ;;
        pin) PIN=1; BENCH_SHIFT=1 ;;
        no-pin) PIN=0; BENCH_SHIFT=1 ;;
        skip-build) SKIP_BUILD=1; BENCH_SHIFT=1 ;;
        *) echo "unknown option: $1" >&2; bench_usage 2 ;;
    esac
}
