#!/usr/bin/env bash
# bench/models.sh: experiment E3 (issue 9) — tern's four concurrency models
# (event, pool, staged, per-request) driving the same connection code, on
# 1 and 2 CPUs, serving a 115 KB static file and the C hello CGI
# (gateway/build/hello.cgi) mixed at CGI shares 0/25/50/75/100 %.
#
# For every CPU count × share × model, one `tern serve --model M --cpus LIST`
# with its service records on (log.service_records):
#   1. a closed-loop probe (tern bench -c CONNS, PROBE seconds) finds the
#      capacity C in requests/s;
#   2. open-loop steps (tern bench --rate R) at fractions STEPS of C, from
#      low load to past saturation, DUR seconds each; per step: throughput,
#      p99 of the response time (measured from each request's intended send
#      time, so a stall counts for every request it delays), failed requests;
#   3. the service records summarised: service time (end - start) p50/p99
#      over the whole run; at the saturation step, from the requests that
#      arrived during it, the spreads of start - arrival (time waiting to be
#      served: arrival is when the readiness that brought the request's
#      first bytes was seen) and end - arrival, p50/p99; under staged the
#      mean time queued and working per stage.
# The saturation point of a model is the highest rate it carried (throughput
# >= 95 % of the rate asked for, p99 under SLO_MS, no failed request).
# One table per CPU count (bench/lib/models_report.py), plus which model wins
# where. With 1 CPU the server runs on CPU 0 and tern bench on CPU 1; with 2
# CPUs they share both (said so in the table): on a 2-core host the generator
# competes with the server.
#
# Usage: bench/models.sh [options]       (each option also has an env variable)
#   -q, --quick              a few minutes: 1 CPU and 2 CPUs, shares 0/50/100,
#                            three steps, 3 s each                QUICK=1
#   -d, --duration S         seconds per open-loop step            DUR=10
#       --probe S            seconds of the closed-loop probe      PROBE=5
#       --steps LIST         fractions of the probed capacity      STEPS=0.25,0.5,0.75,0.9,1.0,1.1,1.25
#   -c, --connections N      connections of every run              CONNS=64
#   -m, --models LIST        comma list                            MODELS=event,pool,staged,per-request
#       --shares LIST        CGI shares in percent                 SHARES=0,25,50,75,100
#       --cpus LIST          CPU counts                            CPU_COUNTS=1,2
#       --slo-ms MS          p99 bound of a carried step           SLO_MS=500
#       --skip-build         no cargo build / make                 SKIP_BUILD=1
#       --tern PATH          this tern binary (no cargo build)     TERN=
#       --no-report          no tables at the end (a part of a sweep
#                            split over several runs: give all their
#                            directories to bench/lib/models_report.py)
#                                                                  REPORT=0
#   -h, --help
# Output: tables on stdout; configs, logs, service records, raw JSON of every
# tern bench run and runs.jsonl in bench/out/models-YYYYmmdd-HHMMSS/.
# Default duration: 2 × 5 × 4 × (5 s + 7 × 10 s) ≈ 50 minutes. --quick:
# 2 × 3 × 4 × (2 s + 3 × 3 s) ≈ 5 minutes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

QUICK=${QUICK:-0}
DUR=${DUR:-10}
PROBE=${PROBE:-5}
STEPS=${STEPS:-0.25,0.5,0.75,0.9,1.0,1.1,1.25}
CONNS=${CONNS:-64}
MODELS=${MODELS:-event,pool,staged,per-request}
SHARES=${SHARES:-0,25,50,75,100}
CPU_COUNTS=${CPU_COUNTS:-1,2}
SLO_MS=${SLO_MS:-500}
SKIP_BUILD=${SKIP_BUILD:-0}
TERN=${TERN:-}
REPORT=${REPORT:-1}

readonly PACKAGES=(curl make gcc libc6-dev python3 procps util-linux)
readonly STATIC_PATH=/static/115k.bin
readonly CGI_PATH=/cgi-bin/hello.cgi
readonly STATIC_BYTES=117760

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            -q|--quick) QUICK=1; shift ;;
            --probe) PROBE=$2; shift 2 ;;
            --steps) STEPS=$2; shift 2 ;;
            -m|--models) MODELS=$2; shift 2 ;;
            --shares) SHARES=$2; shift 2 ;;
            --cpus) CPU_COUNTS=$2; shift 2 ;;
            --slo-ms) SLO_MS=$2; shift 2 ;;
            --tern) TERN=$2; shift 2 ;;
            --no-report) REPORT=0; shift ;;
            *) bench_option "duration connections skip-build" "$@"; shift "$BENCH_SHIFT" ;;
        esac
    done
    if [[ $QUICK == 1 ]]; then
        DUR=3 PROBE=2 STEPS=0.5,1.0,1.25 SHARES=0,50,100
    fi
    local v
    for v in DUR PROBE CONNS SLO_MS; do
        [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
    done
    IFS=, read -r -a MODEL_LIST <<<"$MODELS"
    IFS=, read -r -a SHARE_LIST <<<"$SHARES"
    IFS=, read -r -a CPU_LIST <<<"$CPU_COUNTS"
    IFS=, read -r -a STEP_LIST <<<"$STEPS"
    local m s
    for m in "${MODEL_LIST[@]}"; do
        [[ $m =~ ^(event|pool|staged|per-request)$ ]] || bench_die "unknown model '$m'"
    done
    for s in "${SHARE_LIST[@]}"; do
        [[ $s =~ ^[0-9]+$ && $s -le 100 ]] || bench_die "a CGI share is a percentage (got '$s')"
    done
    for s in "${CPU_LIST[@]}"; do
        [[ $s =~ ^[12]$ ]] || bench_die "CPU counts are 1 or 2 (got '$s')"
        ((s <= $(nproc))) || bench_die "$s CPUs asked for, $(nproc) usable"
    done
    for s in "${STEP_LIST[@]}"; do
        [[ $s =~ ^[0-9]+(\.[0-9]+)?$ ]] || bench_die "a step is a fraction of the capacity (got '$s')"
    done
}

setup() {
    "$ROOT/scripts/ensure-packages.sh" "${PACKAGES[@]}"
    bench_start_run models
    bench_raise_fd_limit $((4 * CONNS + 100)) "$CONNS connections"
    if [[ $SKIP_BUILD != 1 ]]; then
        bench_log "make -C gateway (log: $OUT/make-gateway.log)"
        make -C "$ROOT/gateway" >"$OUT/make-gateway.log" 2>&1 || bench_die "make -C gateway failed (see $OUT/make-gateway.log)"
    fi
    if [[ -n $TERN ]]; then
        TERN_BIN=$TERN
        [[ -x $TERN_BIN ]] || bench_die "$TERN_BIN is not an executable"
    else
        bench_build_tern
        ((TERN_OK)) || bench_die "no tern binary"
    fi
    local cgi=$ROOT/gateway/build/hello.cgi
    [[ -x $cgi ]] || bench_die "$cgi does not exist (run make -C gateway)"
    DOCROOT=$OUT/docroot
    mkdir -p "$DOCROOT/static" "$DOCROOT/cgi-bin"
    head -c "$STATIC_BYTES" /dev/urandom >"$DOCROOT$STATIC_PATH"
    install -m 755 "$cgi" "$DOCROOT$CGI_PATH"
}

write_meta() {
    {
        printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf 'command\t%s\n' "$COMMAND_LINE"
        printf 'git_commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        printf 'tern\t%s\n' "$TERN_BIN"
        printf 'nproc\t%s\n' "$(nproc)"
        printf 'kernel\t%s\n' "$(uname -r)"
        printf 'cpu_model\t%s\n' "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
        printf 'loadavg_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
        printf 'duration_s\t%s\nprobe_s\t%s\nsteps\t%s\nconnections\t%s\nslo_ms\t%s\n' \
            "$DUR" "$PROBE" "$STEPS" "$CONNS" "$SLO_MS"
        printf 'static\t%s (%s bytes)\ncgi\t%s (gateway/build/hello.cgi)\n' "$STATIC_PATH" "$STATIC_BYTES" "$CGI_PATH"
        printf 'clk_tck\t%s\n' "$(getconf CLK_TCK)"
    } >"$OUT/meta.tsv"
}

# mix_for SHARE: the tern bench arguments for a CGI share (a mix file
# for shares between 0 and 100).
mix_for() {
    local share=$1 file=$OUT/mix-$1.txt
    MIX_ARGS=()
    case $share in
        0) MIX_ARGS=("http://127.0.0.1:$PORT$STATIC_PATH") ;;
        100) MIX_ARGS=("http://127.0.0.1:$PORT$CGI_PATH") ;;
        *)
            printf '%s %s\n%s %s\n' $((100 - share)) "$STATIC_PATH" "$share" "$CGI_PATH" >"$file"
            MIX_ARGS=(--mix "$file" "http://127.0.0.1:$PORT/") ;;
    esac
}

# start_tern MODEL CPUS RUNDIR: starts tern on CPUs 0..CPUS-1 with service
# records in RUNDIR; sets PORT and TERN_PID. Returns 1 when it does not come up.
start_tern() {
    local model=$1 cpus=$2 rundir=$3 list
    list=$(seq -s, 0 $((cpus - 1)))
    PORT=$(free_port)
    cat >"$rundir/tern.toml" <<EOF
[log]
access = "off"
service_records = "$rundir/records.csv"

[cgi]
max_processes = 256
allow_root = true

[limits]
keepalive_requests = 0
EOF
    "$TERN_BIN" serve "$DOCROOT" --listen "127.0.0.1:$PORT" --model "$model" --cpus "$list" \
        --config "$rundir/tern.toml" >"$rundir/stdout.log" 2>"$rundir/stderr.log" </dev/null &
    TERN_PID=$!
    BENCH_PIDS+=("$TERN_PID")
    if ! wait_http "http://127.0.0.1:$PORT$STATIC_PATH" "$TERN_PID" 15; then
        bench_banner "tern --model $model --cpus $list did not start: SKIPPED." "$(tail -n 5 "$rundir/stderr.log" | tr '\n' ' ')"
        echo "$model cpus=$cpus: did not start" >>"$SKIPS"
        stop_tern
        return 1
    fi
}

stop_tern() {
    [[ -n ${TERN_PID:-} ]] || return 0
    stop_tree "$TERN_PID"
    forget_pid "$TERN_PID"
    TERN_PID=""
}

# monotonic_us: now on CLOCK_MONOTONIC, the service records' clock.
monotonic_us() {
    python3 -c 'import time; print(time.monotonic_ns() // 1000)'
}

# bench_json FILE DURATION [RATE]: one tern bench run (on CPU 1 when the server
# has CPU 0 alone) writing its JSON report to FILE.
bench_json() {
    local file=$1 dur=$2 rate=${3:-}
    local -a pin=() rate_args=()
    ((CUR_CPUS == 1)) && pin=(taskset -c 1)
    [[ -n $rate ]] && rate_args=(--rate "$rate")
    timeout -k 5 $((dur + 60)) "${pin[@]}" "$TERN_BIN" bench "${MIX_ARGS[@]}" -c "$CONNS" -t 2 -d "${dur}s" \
        --timeout 10s "${rate_args[@]}" --json >"$file" 2>"${file%.json}.err" || true
    [[ -s $file ]] || bench_log "tern bench wrote nothing (see ${file%.json}.err)"
}

# measure MODEL CPUS SHARE: probe, steps, records; one JSON line per step.
measure() {
    local model=$1 cpus=$2 share=$3
    local rundir=$OUT/cpus$cpus/share$share/$model
    mkdir -p "$rundir"
    CUR_CPUS=$cpus
    start_tern "$model" "$cpus" "$rundir" || return 0
    mix_for "$share"
    local load0 busy0 busy1 t0 t1 m0 m1
    bench_json "$rundir/probe.json" "$PROBE"
    local capacity
    capacity=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["requests_per_s"]))' \
        "$rundir/probe.json" 2>/dev/null || echo 0)
    if ((capacity < 10)); then
        bench_banner "$model cpus=$cpus share=$share%: the probe carried $capacity req/s: SKIPPED."
        echo "$model cpus=$cpus share=$share: probe failed" >>"$SKIPS"
        stop_tern
        return 0
    fi
    bench_log "$model cpus=$cpus cgi=$share%: capacity $capacity req/s (closed loop, $CONNS connections)"
    local step rate
    for step in "${STEP_LIST[@]}"; do
        rate=$(awk -v c="$capacity" -v f="$step" 'BEGIN { r = int(c * f); print (r < 1 ? 1 : r) }')
        load0=$(cut -d' ' -f1 /proc/loadavg)
        m0=$(monotonic_us)
        busy0=$(system_busy_ticks); t0=$(date +%s.%N)
        bench_json "$rundir/step-$step.json" "$DUR" "$rate"
        t1=$(date +%s.%N); busy1=$(system_busy_ticks)
        m1=$(monotonic_us)
        printf '{"model":"%s","cpus":%s,"share":%s,"capacity":%s,"step":%s,"rate":%s,"file":"%s","loadavg_before":%s,"system_busy_ticks":%s,"wall_s":%s,"t0_us":%s,"t1_us":%s}\n' \
            "$model" "$cpus" "$share" "$capacity" "$step" "$rate" "$rundir/step-$step.json" "$load0" \
            $((busy1 - busy0)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')" "$m0" "$m1" >>"$RUNS"
    done
    kill -0 "$TERN_PID" 2>/dev/null || bench_banner "tern --model $model died during the run (see $rundir)"
    # The records are complete once the server has exited (flushed at exit).
    stop_tern
    printf '{"model":"%s","cpus":%s,"share":%s,"records":"%s"}\n' "$model" "$cpus" "$share" "$rundir/records.csv" \
        >>"$OUT/records.jsonl"
}

main() {
    COMMAND_LINE="bench/models.sh${*:+ $*}"
    parse_args "$@"
    trap stop_all EXIT
    trap 'bench_log "interrupted by a signal; stopping tern"; exit 130' INT TERM
    setup
    write_meta
    : >"$OUT/records.jsonl"
    local start=$SECONDS cpus share model
    for cpus in "${CPU_LIST[@]}"; do
        for share in "${SHARE_LIST[@]}"; do
            # The models' order rotates with the share, so none always
            # runs first (or last) in a hot or busy moment.
            local n=${#MODEL_LIST[@]} i
            for i in $(seq 0 $((n - 1))); do
                model=${MODEL_LIST[$(((i + share / 25) % n))]}
                measure "$model" "$cpus" "$share"
            done
        done
    done
    printf 'loadavg_end\t%s\nelapsed_s\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" $((SECONDS - start)) >>"$OUT/meta.tsv"
    if [[ $REPORT == 1 ]]; then
        python3 "$ROOT/bench/lib/models_report.py" "$OUT" --slo-ms "$SLO_MS" | tee "$OUT/report.txt"
    fi
    [[ -s $SKIPS ]] && bench_banner "Some runs were SKIPPED:" "$(cat "$SKIPS")"
    bench_log "raw data in $OUT"
}

main "$@"
