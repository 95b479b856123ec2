#!/usr/bin/env bash
# bench/cgi.sh: CGI benchmark of tern against lighttpd mod_cgi and
# nginx + fcgiwrap, side by side on 127.0.0.1 in one run (issue 4).
#
# Every server runs the same C program, gateway/build/hello.cgi (5,107 bytes
# of output: a 40-byte CGI header and 5,067 bytes of HTML), one process per
# request, with the same number of workers:
#   tern            --workers W, [cgi] max_processes 256, keep-alive unlimited
#   lighttpd        server.max-worker W, mod_cgi for /cgi-bin/
#   nginx-fcgiwrap  worker_processes W, FastCGI over a Unix socket to fcgiwrap
#                   with F preforked children (it forks and execs per request)
# All three are started first and checked to return the program's exact body;
# then, in R rounds (the server order rotates every round), each server gets a
# warm-up run and a measured run of
#   wrk -tT -cC -dD --latency http://127.0.0.1:PORT/cgi-bin/hello.cgi
# Reported per server, from the run with the median requests/s: requests/s,
# p99; and, median over all runs, CPU per request: everything that ran in the
# server's own CPU-accounting cgroup (its processes and every program they
# started), split into "server" (utime+stime of its own processes, /proc) and
# "CGI"; next to it the /proc figure (server + cutime+cstime of the programs
# they reaped), which agrees for tern and lighttpd but cannot see fcgiwrap's
# programs (fcgiwrap ignores SIGCHLD, so nobody's cutime gets them). Then the
# ratios tern/lighttpd and tern/nginx-fcgiwrap and the target (tern >= 1.2x
# lighttpd).
# The CPU the rest of the machine used during each run (other than the servers,
# their programs and wrk) is shown too: other engineers may be compiling.
#
# Usage: bench/cgi.sh [options]          (each option also has an env variable)
#   -d, --duration S         wrk seconds per measured run       DUR=10
#   -r, --reps N             rounds (median reported)           REPS=3
#   -c, --connections N      wrk connections                    CONNS=64
#   -t, --threads N          wrk threads                        THREADS=1
#   -w, --workers N          server workers                     WORKERS=2
#   -s, --servers LIST       comma list of tern,lighttpd,nginx-fcgiwrap
#                                                               SERVERS=all three
#       --warmup S           warm-up seconds before each run    WARMUP=2
#       --quiet-wait S       before each server's turn, wait up to S seconds
#                            for the machine (servers idle) to be less than
#                            P % busy over 1 s (0: never wait)  QUIET_WAIT=15
#       --quiet-pct P                                           QUIET_PCT=25
#       --fcgiwrap-children N  fcgiwrap processes (default: the connection
#                            count, so up to C programs run at once behind
#                            nginx, as behind tern and lighttpd) FCGI_CHILDREN=C
#       --pin                servers (and their programs) on CPU 0, wrk on
#                            CPU 1                              PIN=1
#       --skip-build         no cargo build / make              SKIP_BUILD=1
#       --profile            afterwards, profile tern under the same load:
#                            strace -c (its threads; then with -f, the programs
#                            too) and perf record (its threads only); then the
#                            floor: bench/cgi_floor.c runs the program 1,000
#                            times from a minimal C parent (posix_spawn, vfork,
#                            fork), no HTTP                     PROFILE=1
#       --profile-duration S seconds per profiling run          PROFILE_DUR=5
#       --gwbench            afterwards, run gateway/build/gwbench once with
#                            its defaults (a few minutes)       GWBENCH=1
#                            (extra gwbench arguments:          GWBENCH_ARGS="")
#   -h, --help
# Output: tables on stdout; configs, logs, raw wrk output, runs.jsonl and
# results.json in bench/out/cgi-YYYYmmdd-HHMMSS/; results.json is also copied
# to bench/out/cgi-latest.json.
# Default duration: about 2.5 minutes (3 rounds x 3 servers x (2 s + 10 s)),
# plus up to 9 x 15 s of waiting for quiet moments on a busy machine.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

DUR=${DUR:-10}
REPS=${REPS:-3}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
WORKERS=${WORKERS:-2}
SERVERS=${SERVERS:-tern,lighttpd,nginx-fcgiwrap}
WARMUP=${WARMUP:-2}
FCGI_CHILDREN=${FCGI_CHILDREN:-}
PIN=${PIN:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
PROFILE=${PROFILE:-0}
PROFILE_DUR=${PROFILE_DUR:-5}
GWBENCH=${GWBENCH:-0}
GWBENCH_ARGS=${GWBENCH_ARGS:-}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_WAIT=${QUIET_WAIT:-15}

readonly PACKAGES=(lighttpd nginx fcgiwrap wrk curl make gcc libc6-dev python3 procps)
readonly ALL_SERVERS=(tern lighttpd nginx-fcgiwrap)
readonly CGI_NAME=hello.cgi
readonly CGI_URL_PATH=/cgi-bin/$CGI_NAME
# How CGI programs show up in /proc/PID/stat (comm, at most 15 bytes).
readonly CGI_COMM=${CGI_NAME:0:15}
readonly MAXCONN=4096

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            --quiet-wait) QUIET_WAIT=$2; shift 2 ;;
            --quiet-pct) QUIET_PCT=$2; shift 2 ;;
            --fcgiwrap-children) FCGI_CHILDREN=$2; shift 2 ;;
            --profile) PROFILE=1; shift ;;
            --profile-duration) PROFILE_DUR=$2; shift 2 ;;
            --gwbench) GWBENCH=1; shift ;;
            *) bench_option "duration reps connections threads workers servers warmup pin skip-build" "$@"; shift "$BENCH_SHIFT" ;;
        esac
    done
    FCGI_CHILDREN=${FCGI_CHILDREN:-$CONNS}
    local v
    for v in DUR REPS CONNS THREADS WORKERS WARMUP FCGI_CHILDREN PROFILE_DUR; do
        [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
    done
    IFS=, read -r -a SERVER_LIST <<<"$SERVERS"
    local s
    for s in "${SERVER_LIST[@]}"; do
        [[ " ${ALL_SERVERS[*]} " == *" $s "* ]] || bench_die "unknown server '$s' (known: ${ALL_SERVERS[*]})"
    done
    [[ $PROFILE != 1 || " ${SERVER_LIST[*]} " == *" tern "* ]] || bench_die "--profile needs tern among the servers"
}

# ---------------------------------------------------------------- setup

setup() {
    local -a pkgs=("${PACKAGES[@]}")
    [[ $PROFILE == 1 ]] && pkgs+=(strace linux-perf)
    "$ROOT/scripts/ensure-packages.sh" "${pkgs[@]}"

    bench_start_run cgi
    bench_raise_fd_limit $((2 * CONNS + 100)) "$CONNS connections"

    # Commands are prefixed with these (never run a shell function in the
    # background: $! would be a subshell, not the program).
    SERVER_CPUS="" SERVER_PIN=() CLIENT_PIN=()
    if [[ $PIN == 1 ]]; then
        if (($(nproc) >= 2)); then
            SERVER_CPUS=0 SERVER_PIN=(taskset -c 0) CLIENT_PIN=(taskset -c 1)
        else
            bench_log "only $(nproc) CPU: not pinning"
            PIN=0
        fi
    fi
}

build() {
    TERN_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/tern
    CGI_BIN=$ROOT/gateway/build/$CGI_NAME
    if [[ $SKIP_BUILD != 1 ]]; then
        bench_log "make -C gateway (log: $OUT/make-gateway.log)"
        if ! make -C "$ROOT/gateway" >"$OUT/make-gateway.log" 2>&1; then
            tail -n 15 "$OUT/make-gateway.log" >&2
            bench_die "make -C gateway failed (see $OUT/make-gateway.log)"
        fi
    fi
    [[ -x $CGI_BIN ]] || bench_die "$CGI_BIN does not exist (run make -C gateway)"

    TERN_OK=1
    [[ " ${SERVER_LIST[*]} " == *" tern "* ]] || return 0
    bench_build_tern
}

# The docroot holds only cgi-bin/hello.cgi (a copy of the built program).
# The reference body is what the program itself prints after its header.
make_docroot() {
    DOCROOT=$OUT/docroot
    mkdir -p "$DOCROOT/cgi-bin"
    install -m 755 "$CGI_BIN" "$DOCROOT/cgi-bin/$CGI_NAME"
    (cd "$DOCROOT/cgi-bin" && env -i GATEWAY_INTERFACE=CGI/1.1 REQUEST_METHOD=GET \
        SCRIPT_NAME="$CGI_URL_PATH" SERVER_PROTOCOL=HTTP/1.1 "./$CGI_NAME") >"$OUT/program-output.txt"
    # Everything after the first empty line (CGI header lines end in LF or CRLF).
    sed '1,/^\r\{0,1\}$/d' "$OUT/program-output.txt" >"$OUT/reference-body.html"
    PROGRAM_BYTES=$(stat -c %s "$OUT/program-output.txt")
    BODY_BYTES=$(stat -c %s "$OUT/reference-body.html")
    ((BODY_BYTES > 0)) || bench_die "$CGI_NAME printed no body (see $OUT/program-output.txt)"
    bench_log "$CGI_NAME prints $PROGRAM_BYTES bytes: $((PROGRAM_BYTES - BODY_BYTES)) of CGI header, a $BODY_BYTES-byte body"
}

version_of() {
    case $1 in
        lighttpd) lighttpd -v 2>&1 | head -n1 ;;
        nginx) nginx -v 2>&1 | head -n1 ;;
        fcgiwrap) echo "fcgiwrap $(dpkg-query -W -f='${Version}' fcgiwrap 2>/dev/null)" ;;
        wrk) wrk --version 2>&1 | head -n1 | sed 's/ Copyright.*//' ;;
    esac
}

write_meta() {
    {
        printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'command\t%s\n' "$COMMAND_LINE"
        printf 'git_commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        printf 'nproc\t%s\n' "$(nproc)"
        printf 'kernel\t%s\n' "$(uname -r)"
        printf 'cpu_model\t%s\n' "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
        printf 'lighttpd\t%s\n' "$(version_of lighttpd)"
        printf 'nginx\t%s\n' "$(version_of nginx)"
        printf 'fcgiwrap\t%s\n' "$(version_of fcgiwrap)"
        printf 'wrk\t%s\n' "$(version_of wrk)"
        printf 'program\t%s (%s bytes of output, %s-byte body)\n' "$CGI_NAME" "$PROGRAM_BYTES" "$BODY_BYTES"
        printf 'loadavg_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
        printf 'duration_s\t%s\n' "$DUR"
        printf 'warmup_s\t%s\n' "$WARMUP"
        printf 'connections\t%s\n' "$CONNS"
        printf 'threads\t%s\n' "$THREADS"
        printf 'reps\t%s\n' "$REPS"
        printf 'workers\t%s\n' "$WORKERS"
        printf 'fcgiwrap_children\t%s\n' "$FCGI_CHILDREN"
        printf 'quiet_gate\t%s\n' "before each server's turn, up to ${QUIET_WAIT}s of waiting for < ${QUIET_PCT}% busy"
        printf 'pinning\t%s\n' "$( ((PIN)) && echo "servers and programs on CPU $SERVER_CPUS, wrk on CPU 1" || echo none)"
        printf 'clk_tck\t%s\n' "$(getconf CLK_TCK)"
    } >"$OUT/meta.tsv"
}

# ---------------------------------------------------------------- servers

# render TEMPLATE OUTFILE RUNDIR PORT: fill in a config template.
render() {
    sed -e "s|@PORT@|$4|g" -e "s|@WORKERS@|$WORKERS|g" -e "s|@RUNDIR@|$3|g" \
        -e "s|@DOCROOT@|$DOCROOT|g" -e "s|@MAXCONN@|$MAXCONN|g" -e "s|@MAXFDS@|$MAXFDS|g" "$1" >"$2"
    if grep -v '^[[:space:]]*#' "$2" | grep -q '@[A-Z]*@'; then bench_die "unfilled placeholder in $2"; fi
}

# ---------------------------------------------------------------- cgroups

# fcgiwrap ignores SIGCHLD, so the kernel reaps its programs and their CPU
# time never reaches any cutime/cstime in /proc. To see it, every server (all
# of them alike) is started in a CPU-accounting cgroup of its own, which
# counts every task that ever ran in it: cgroup v2 (cpu.stat usage_usec) or
# the v1 cpuacct hierarchy (cpuacct.usage). Without a writable one, the CGI
# share of nginx-fcgiwrap is reported as unknown.
CG_KIND="" CG_BASE=""
declare -A CG_DIR=()
cg_setup() {
    local rel dir
    if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
        rel=$(awk -F: '$1 == "0" {print $3; exit}' /proc/self/cgroup)
        CG_KIND=v2 dir=/sys/fs/cgroup${rel%/}
    elif [[ -d /sys/fs/cgroup/cpuacct ]]; then
        rel=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ {print $3; exit}' /proc/self/cgroup)
        CG_KIND=v1 dir=/sys/fs/cgroup/cpuacct${rel%/}
    else
        return 0
    fi
    CG_BASE=$dir/tern-bench-cgi-$$
    if ! mkdir "$CG_BASE" 2>/dev/null; then
        bench_log "cannot create a cgroup under $dir: CPU of programs fcgiwrap starts is not measured"
        CG_KIND="" CG_BASE=""
    fi
}

# cg_usage_us NAME: CPU microseconds used so far in NAME's cgroup, or nothing.
cg_usage_us() {
    local dir=${CG_DIR[$1]:-} v
    [[ -n $dir ]] || return 0
    if [[ $CG_KIND == v2 ]]; then
        awk '$1 == "usage_usec" {print $2; exit}' "$dir/cpu.stat"
    else
        read -r v <"$dir/cpuacct.usage" && echo $((v / 1000))
    fi
}

# cg_wrap NAME: sets CG_PREFIX to a command prefix that moves the command
# into NAME's cgroup (created on first use) before it execs.
cg_wrap() {
    CG_PREFIX=()
    [[ -n $CG_BASE ]] || return 0
    local dir=$CG_BASE/$1
    [[ -d $dir ]] || mkdir "$dir" 2>/dev/null || return 0
    CG_DIR[$1]=$dir
    # shellcheck disable=SC2016  # expanded by that sh
    CG_PREFIX=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$dir")
}

# Remove our cgroups once empty (killed processes that are not reaped yet,
# e.g. fcgiwrap's orphaned children, still count: wait up to 5 s for them).
cg_cleanup() {
    [[ -n $CG_BASE && -d $CG_BASE ]] || return 0
    local dir
    for dir in "$CG_BASE"/*/; do
        [[ -d $dir ]] || continue
        for _ in $(seq 1 50); do
            rmdir "$dir" 2>/dev/null && break
            sleep 0.1
        done
        [[ ! -d $dir ]] || bench_log "could not remove cgroup $dir"
    done
    rmdir "$CG_BASE" 2>/dev/null || bench_log "could not remove cgroup $CG_BASE"
}

# ---------------------------------------------------------------- starting

# launch RUNDIR LABEL CMD...: start CMD in its own session (lighttpd signals
# its whole process group when it stops, which would otherwise include us) and
# in the cgroup of the server being started (CUR_SERVER); sets LAUNCHED to its
# PID.
launch() {
    local rundir=$1 label=$2
    shift 2
    printf '%q ' "$@" >"$rundir/command-$label.txt"
    cg_wrap "$CUR_SERVER"
    setsid "${SERVER_PIN[@]}" "${CG_PREFIX[@]}" "$@" >"$rundir/stdout-$label.log" 2>"$rundir/stderr-$label.log" </dev/null &
    LAUNCHED=$!
    BENCH_PIDS+=("$LAUNCHED")
}

# Servers by name: port, process-tree roots (all measured), run directory.
declare -A SRV_PORT=() SRV_ROOTS=() SRV_DIR=()
STARTED=()

# start_server NAME: returns 1 (after saying why) when it does not come up.
start_server() {
    local name=$1 port roots=""
    local rundir=$OUT/$name
    CUR_SERVER=$name
    mkdir -p "$rundir"
    port=$(free_port)
    case $name in
        tern)
            [[ $TERN_OK == 1 ]] || return 1
            render "$ROOT/bench/peers/tern-cgi.toml.tmpl" "$rundir/tern.toml" "$rundir" "$port"
            launch "$rundir" tern "$TERN_BIN" serve "$DOCROOT" --listen "127.0.0.1:$port" --workers "$WORKERS" \
                --access-log off --config "$rundir/tern.toml"
            roots=$LAUNCHED ;;
        lighttpd)
            render "$ROOT/bench/peers/lighttpd-cgi.conf.tmpl" "$rundir/lighttpd.conf" "$rundir" "$port"
            launch "$rundir" lighttpd lighttpd -D -f "$rundir/lighttpd.conf"
            roots=$LAUNCHED ;;
        nginx-fcgiwrap)
            # fcgiwrap first: nginx only forwards to its socket.
            launch "$rundir" fcgiwrap fcgiwrap -c "$FCGI_CHILDREN" -s "unix:$rundir/fcgiwrap.sock"
            roots=$LAUNCHED
            local i
            for i in $(seq 1 100); do
                [[ -S $rundir/fcgiwrap.sock ]] && break
                kill -0 "$roots" 2>/dev/null || break
                sleep 0.05
            done
            render "$ROOT/bench/peers/nginx-cgi.conf.tmpl" "$rundir/nginx.conf" "$rundir" "$port"
            launch "$rundir" nginx nginx -e "$rundir/error.log" -c "$rundir/nginx.conf" -p "$rundir/"
            roots="$LAUNCHED $roots" ;;
    esac
    SRV_PORT[$name]=$port SRV_ROOTS[$name]=$roots SRV_DIR[$name]=$rundir
    STARTED+=("$name")
    local root ok=1
    for root in $roots; do
        wait_http "http://127.0.0.1:$port$CGI_URL_PATH" "$root" 15 || { ok=0; break; }
    done
    if ((ok)) && [[ $name == tern ]] && ! grep -q "listening on http://127.0.0.1:$port/" "$rundir/stderr-tern.log"; then
        ok=0
    fi
    if ((ok == 0)); then
        local why
        why=$(tail -q -n 5 "$rundir"/stderr-*.log "$rundir/error.log" 2>/dev/null | tr '\n' ' ' | cut -c1-400)
        bench_banner "$name did not start: its row is SKIPPED." "output: $why"
        echo "$name: did not start: $why" >>"$SKIPS"
        stop_server "$name"
        return 1
    fi
    check_pinning "$name"
}

# Warn when a server moved some of its threads off the CPU we gave it.
check_pinning() {
    [[ $PIN == 1 ]] || return 0
    local root pid st list bad=0
    for root in ${SRV_ROOTS[$1]}; do
        for pid in $(proc_tree "$root"); do
            for st in /proc/"$pid"/task/*/status; do
                list=$(awk '/^Cpus_allowed_list/ {print $2}' "$st" 2>/dev/null) || continue
                [[ -z $list || $list == "$SERVER_CPUS" ]] || bad=1
            done
        done
    done
    ((bad == 0)) || bench_banner "$1 runs threads outside CPU $SERVER_CPUS (it sets its own affinity):" \
                                 "its numbers are not pinned like the others'."
}

# stop_server NAME: stop every process tree of the server. fcgiwrap's
# supervisor leaves its preforked children running when it is killed, so the
# whole tree gets SIGTERM at once.
stop_server() {
    local name=$1 root pid keep=()
    for root in ${SRV_ROOTS[$name]:-}; do
        if [[ $name == nginx-fcgiwrap ]]; then
            for pid in $(proc_tree "$root"); do kill -TERM "$pid" 2>/dev/null || true; done
        fi
        stop_tree "$root"
        forget_pid "$root"
    done
    SRV_ROOTS[$name]=""
    for pid in "${STARTED[@]}"; do [[ $pid == "$name" ]] || keep+=("$pid"); done
    STARTED=("${keep[@]}")
}

stop_servers() {
    local name
    for name in "${STARTED[@]}"; do stop_server "$name"; done
}

on_exit() {
    stop_servers
    stop_all
    cg_cleanup
}

# verify_content NAME: the body must be the program's body, byte for byte.
# Prints the problem and returns 1.
verify_content() {
    local name=$1 file=${SRV_DIR[$1]}/check-body.html got code size
    got=$(curl -s -m 10 -o "$file" -w '%{http_code} %{size_download}' \
        "http://127.0.0.1:${SRV_PORT[$name]}$CGI_URL_PATH") || got="000 0"
    read -r code size <<<"$got"
    printf '%-16s HTTP %s, %s-byte body' "$name" "$code" "$size" >&2
    if [[ $code != 200 ]]; then echo >&2; echo "$name answered HTTP $code"; return 1; fi
    if ! cmp -s "$file" "$OUT/reference-body.html"; then
        echo >&2
        echo "$name: the body ($size bytes) differs from the program's ($BODY_BYTES bytes; kept as $file)"
        return 1
    fi
    echo ", identical to the program's" >&2
}

start_checked() {
    local name=$1 problem
    start_server "$name" || return 1
    if ! problem=$(verify_content "$name"); then
        bench_banner "$name serves wrong content: its row is SKIPPED." "$problem"
        echo "$name: wrong content: $problem" >>"$SKIPS"
        stop_server "$name"
        return 1
    fi
}

# ---------------------------------------------------------------- measuring

# cpu_ticks ROOT...: "SERVER CGI" clock ticks over the process trees: SERVER
# is utime+stime of the server's own processes; CGI is cutime+cstime of every
# process in the trees (the programs they started and reaped) plus utime+stime
# of programs still running. Nothing is counted twice: a reaped program has
# left the tree and lives on only in its parent's cutime/cstime.
cpu_ticks() {
    local server=0 cgi=0 root pid stat comm
    local -a f
    for root in "$@"; do
        for pid in $(proc_tree "$root"); do
            { read -r stat <"/proc/$pid/stat"; } 2>/dev/null || continue
            comm=${stat#*\(}; comm=${comm%\) *}
            stat=${stat##*) }           # fields from 3 on; comm may hold spaces
            read -r -a f <<<"$stat"
            # fields 14, 15 (utime, stime), 16, 17 (cutime, cstime)
            if [[ $comm == "$CGI_COMM" ]]; then
                cgi=$((cgi + f[11] + f[12]))
            else
                server=$((server + f[11] + f[12]))
            fi
            cgi=$((cgi + f[13] + f[14]))
        done
    done
    echo "$server $cgi"
}

# Warn when wrk saw errors or non-2xx answers.
check_wrk() {
    local name=$1 file=$2 bad
    bad=$(grep -E 'Non-2xx|Socket errors|wrk exited|unable to connect' "$file" || true)
    [[ -z $bad ]] || bench_log "$name: wrk reported: $(tr '\n' ' ' <<<"$bad")"
}

# wrk_run NAME LABEL DURATION [POSITION]: one wrk run with CPU snapshots
# around it; measured runs (a numeric LABEL) append a JSON line to runs.jsonl.
wrk_run() {
    local name=$1 label=$2 dur=$3 pos=${4:-0}
    local file=${SRV_DIR[$name]}/wrk-$label.txt tfile=${SRV_DIR[$name]}/wrk-$label.time
    local load0 c0 c1 g0 g1 busy0 busy1 t0 t1
    local -a a b roots
    read -r -a roots <<<"${SRV_ROOTS[$name]}"
    load0=$(cut -d' ' -f1 /proc/loadavg)
    c0=$(cpu_ticks "${roots[@]}"); g0=$(cg_usage_us "$name"); busy0=$(system_busy_ticks); t0=$(date +%s.%N)
    local TIMEFORMAT='%3U %3S'
    { time timeout -k 5 $((dur + 30)) "${CLIENT_PIN[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${dur}s" --timeout 5s --latency \
        "http://127.0.0.1:${SRV_PORT[$name]}$CGI_URL_PATH" >"$file" 2>&1 || echo "wrk exited with $?" >>"$file"; } 2>"$tfile"
    t1=$(date +%s.%N); busy1=$(system_busy_ticks); g1=$(cg_usage_us "$name"); c1=$(cpu_ticks "${roots[@]}")
    local root
    for root in "${roots[@]}"; do
        kill -0 "$root" 2>/dev/null || bench_banner "$name died during run $label (see ${SRV_DIR[$name]})"
    done
    check_wrk "$name" "$file"
    [[ $label =~ ^[0-9]+$ ]] || return 0
    read -r -a a <<<"$c0"; read -r -a b <<<"$c1"
    local wrk_cpu_s
    wrk_cpu_s=$(awk '{printf "%.3f", $1 + $2}' "$tfile" 2>/dev/null || echo 0)
    printf '{"server":"%s","rep":%s,"position":%s,"duration_s":%s,"wrk_file":"%s","server_ticks":%d,"cgi_ticks":%d,"wall_s":%s,"system_busy_ticks":%d,"wrk_cpu_s":%s,"loadavg_before":%s,"cgroup_us":%s}\n' \
        "$name" "$label" "$pos" "$dur" "$file" $((b[0] - a[0])) $((b[1] - a[1])) \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')" $((busy1 - busy0)) \
        "${wrk_cpu_s:-0}" "$load0" "$(if [[ -n $g0 && -n $g1 ]]; then echo $((g1 - g0)); else echo null; fi)" >>"$RUNS"
    bench_log "$name: run $label: $(awk '/^Requests\/sec/ {print $2 " req/s"}' "$file"), p99 $(awk '$1 == "99%" {print $2}' "$file")"
}

# wait_quiet: other engineers may be compiling on this machine. Before a
# server's turn (every server idle), wait until the CPUs were less than
# QUIET_PCT % busy over one second, for at most QUIET_WAIT seconds; then go
# on regardless (the "others" column shows what each run had to share).
wait_quiet() {
    ((QUIET_WAIT > 0)) || return 0
    local deadline=$((SECONDS + QUIET_WAIT)) b0 b1 pct n
    n=$(nproc)
    while :; do
        b0=$(system_busy_ticks); sleep 1; b1=$(system_busy_ticks)
        pct=$(((b1 - b0) * 100 / (n * $(getconf CLK_TCK))))
        ((pct < QUIET_PCT)) && return 0
        if ((SECONDS >= deadline)); then
            bench_log "the machine is still ${pct}% busy after ${QUIET_WAIT}s of waiting; measuring anyway"
            return 0
        fi
    done
}

# REPS rounds; the order of the servers rotates by one every round.
load_rounds() {
    local rep i n=${#ACTIVE[@]} name
    for rep in $(seq 1 "$REPS"); do
        bench_log "round $rep of $REPS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
        for i in $(seq 0 $((n - 1))); do
            name=${ACTIVE[$(((i + rep - 1) % n))]}
            wait_quiet
            wrk_run "$name" "warmup-$rep" "$WARMUP"
            wrk_run "$name" "$rep" "$DUR" $((i + 1))
        done
    done
}

# ---------------------------------------------------------------- profiling

# Profile tern under the same load: system calls of its own threads (no -f:
# the spawned programs are not followed), then with -f (the programs too: what
# a child does between clone and exec, and the program itself), then perf
# record of its threads only (--no-inherit), each for PROFILE_DUR seconds.
profile_tern() {
    local dir=$OUT/profile port=${SRV_PORT[tern]} pid=${SRV_ROOTS[tern]}
    local -a targs=()
    local tid n
    mkdir -p "$dir"
    for tid in $(tree_tids "$pid"); do targs+=(-p "$tid"); done
    n=$((${#targs[@]} / 2))
    local mode
    for mode in threads follow; do
        local -a extra=()
        [[ $mode == follow ]] && extra=(-f)
        bench_log "profile: strace -c ${extra[*]} on tern's $n threads, wrk ${PROFILE_DUR}s"
        strace "${extra[@]}" -c -o "$dir/strace-$mode.txt" "${targs[@]}" 2>"$dir/strace-$mode.err" &
        local spid=$!
        BENCH_PIDS+=("$spid")
        local attached
        for _ in $(seq 1 100); do
            attached=$(grep -c 'attached' "$dir/strace-$mode.err" 2>/dev/null) || true
            ((${attached:-0} >= n)) && break
            sleep 0.05
        done
        sleep 0.3
        timeout -k 5 $((PROFILE_DUR + 30)) "${CLIENT_PIN[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${PROFILE_DUR}s" --timeout 5s \
            "http://127.0.0.1:$port$CGI_URL_PATH" >"$dir/wrk-strace-$mode.txt" 2>&1 || true
        sleep 0.5
        kill -INT "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        forget_pid "$spid"
    done
    if command -v perf >/dev/null; then
        bench_log "profile: perf record -g --no-inherit on tern, wrk ${PROFILE_DUR}s"
        perf record -q -g --no-inherit -o "$dir/perf.data" -p "$pid" -- sleep $((PROFILE_DUR + 1)) \
            >"$dir/perf-record.log" 2>&1 &
        local ppid=$!
        BENCH_PIDS+=("$ppid")
        sleep 0.5
        timeout -k 5 $((PROFILE_DUR + 30)) "${CLIENT_PIN[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${PROFILE_DUR}s" --timeout 5s \
            "http://127.0.0.1:$port$CGI_URL_PATH" >"$dir/wrk-perf.txt" 2>&1 || true
        wait "$ppid" 2>/dev/null || true
        forget_pid "$ppid"
        perf report -i "$dir/perf.data" --no-children --sort dso,sym --stdio -g none --percent-limit 0.7 \
            >"$dir/perf-report.txt" 2>/dev/null || true
    fi
    # The floor: the same program run 1,000 times, one at a time, from a
    # minimal C parent (no HTTP), made by posix_spawn, vfork and fork.
    if gcc -O2 -Wall -o "$dir/cgi_floor" "$ROOT/bench/cgi_floor.c" 2>"$dir/cgi_floor-build.log"; then
        local m
        for m in spawn vfork fork; do
            bench_log "profile: cgi_floor -m $m"
            timeout -k 5 120 "${SERVER_PIN[@]}" "$dir/cgi_floor" -n 1000 -m "$m" "$DOCROOT/cgi-bin/$CGI_NAME" \
                >>"$dir/cgi_floor.txt" 2>&1 || true
        done
    else
        bench_log "profile: cgi_floor did not build (see $dir/cgi_floor-build.log)"
    fi
    python3 "$ROOT/bench/cgi_report.py" --profile "$dir" | tee "$dir/summary.txt"
}

# ---------------------------------------------------------------- gwbench

run_gwbench() {
    local gw=$ROOT/gateway/build/gwbench
    [[ -x $gw ]] || { bench_log "no $gw: gwbench skipped"; return 0; }
    bench_log "gwbench${GWBENCH_ARGS:+ $GWBENCH_ARGS} (with the defaults: several minutes), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    printf 'gwbench_loadavg_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.tsv"
    local -a args
    read -r -a args <<<"$GWBENCH_ARGS"
    printf 'gwbench_command\t%s\n' "cd gateway && build/gwbench ${args[*]} --json $OUT/gwbench.json" >>"$OUT/meta.tsv"
    (cd "$ROOT/gateway" && timeout -k 10 1200 build/gwbench "${args[@]}" --json "$OUT/gwbench.json") | tee "$OUT/gwbench.txt"
    printf 'gwbench_loadavg_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.tsv"
}

main() {
    COMMAND_LINE="bench/cgi.sh${*:+ $*}"
    parse_args "$@"
    trap on_exit EXIT
    trap 'bench_log "failed (status $?) at line $LINENO: $BASH_COMMAND"' ERR
    trap 'bench_log "interrupted by a signal; stopping the servers"; exit 130' INT TERM
    setup
    build
    cg_setup
    make_docroot
    write_meta
    local start=$SECONDS name
    ACTIVE=()
    for name in "${SERVER_LIST[@]}"; do
        start_checked "$name" && ACTIVE+=("$name")
    done
    ((${#ACTIVE[@]} > 0)) || bench_die "no server could be measured"
    load_rounds
    printf 'loadavg_end\t%s\nelapsed_s\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" $((SECONDS - start)) >>"$OUT/meta.tsv"
    python3 "$ROOT/bench/cgi_report.py" "$OUT" | tee "$OUT/report.txt"
    cp "$OUT/results.json" "$ROOT/bench/out/cgi-latest.json"
    if [[ $PROFILE == 1 && " ${ACTIVE[*]} " == *" tern "* ]]; then profile_tern; fi
    stop_servers
    if [[ $GWBENCH == 1 ]]; then run_gwbench; fi
    if [[ -s $SKIPS ]]; then
        bench_banner "Some rows were SKIPPED:" "$(cat "$SKIPS")"
    fi
    bench_log "raw data and results.json in $OUT"
}

main "$@"
