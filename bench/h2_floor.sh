#!/usr/bin/env bash
# bench/h2_floor.sh: how fast can a server built on the h2 crate be? Issue
# 33 asks tern to serve 1 KiB over HTTP/2 as fast as h2o; tern's HTTP/2 is
# the h2 crate (conn/h2.rs says why). This puts four servers side by side
# over h2c on 127.0.0.1, each alone on CPU 1 with one worker, loaded by
# `h2load -t1 -c32 -m10` on CPU 0:
#   h2o     Debian's h2o, its own HTTP/2 (file.dir on the file's directory);
#   nghttp2 libnghttp2 with nothing else (bench/h2_floor_nghttp2.c, built
#           here with gcc), the same body, fields and gathered writes: the
#           floor of the C library h2load and curl use;
#   floor   the h2 crate with nothing else (crates/tern-server/examples/
#           h2_floor.rs: one body in memory, tern's response fields, frames
#           gathered as tern gathers them): the least any server on the
#           crate can spend per response;
#   tern    tern serving the file (access log off).
# Each runs DUR seconds, REPS times, the order rotating; medians of
# requests/s and of the server's CPU per response (utime+stime from /proc
# around the run), and the ratios to h2o.
#
# Usage: bench/h2_floor.sh [options]   (each option also has an env variable)
#   -d, --duration S      seconds per run                        DUR=5
#   -r, --reps N          runs per server                        REPS=5
#   -s, --servers LIST    comma list of h2o,nghttp2,floor,tern   SERVERS=h2o,nghttp2,floor,tern
#       --size BYTES      the file's size                        SIZE=1024
#       --skip-build      no cargo build (gcc still runs)        SKIP_BUILD=1
#   -h, --help
# Output: the table (markdown) on stdout and in bench/out/h2floor-*/
# results.md, with the date, commit and load before the run; every client's
# output beside it. Every process started is stopped by its PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

DUR=${DUR:-5}
REPS=${REPS:-5}
SERVERS=${SERVERS:-h2o,nghttp2,floor,tern}
SIZE=${SIZE:-1024}
SKIP_BUILD=${SKIP_BUILD:-0}
while [[ $# -gt 0 ]]; do
    case $1 in
        --size) SIZE=${2:?$1 needs a value}; shift 2 ;;
        *) bench_option "duration reps servers skip-build" "$@"; shift "$BENCH_SHIFT" ;;
    esac
done
for v in DUR REPS SIZE; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
done
IFS=, read -r -a SERVER_LIST <<<"$SERVERS"
for s in "${SERVER_LIST[@]}"; do [[ $s =~ ^(h2o|nghttp2|floor|tern)$ ]] || bench_die "unknown server '$s'"; done
(($(nproc) >= 2)) || bench_die "needs 2 CPUs (server on CPU 1, client on CPU 0)"

"$ROOT/scripts/ensure-packages.sh" h2o nghttp2-client curl procps util-linux gcc libnghttp2-dev
bench_start_run h2floor
trap stop_all EXIT
trap 'exit 130' INT TERM
bench_raise_fd_limit 1024 "the connections"
bench_build_tern
((TERN_OK)) || bench_die "no tern binary"
FLOOR_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/h2_floor
if [[ $SKIP_BUILD != 1 ]]; then
    (cd "$ROOT" && cargo build --release -p tern-server --example h2_floor) >>"$OUT/cargo-build.log" 2>&1 ||
        bench_die "cargo build --example h2_floor failed (see $OUT/cargo-build.log)"
fi
[[ -x $FLOOR_BIN ]] || bench_die "no $FLOOR_BIN"
NGHTTP2_BIN=$OUT/h2_floor_nghttp2
gcc -O2 -Wall -Wextra -o "$NGHTTP2_BIN" "$ROOT/bench/h2_floor_nghttp2.c" -lnghttp2 >"$OUT/gcc-build.log" 2>&1 ||
    bench_die "gcc bench/h2_floor_nghttp2.c failed (see $OUT/gcc-build.log)"

DOCROOT=$OUT/docroot
mkdir -p "$DOCROOT"
head -c "$SIZE" < <(yes 'tern h2 floor: the same bytes every run. 0123456789abcdefghijklmnopqrstuvwxyz') >"$DOCROOT/f.bin"
HZ=$(getconf CLK_TCK)
declare -A PID=() PORT=()

start() {
    local name=$1 dir=$OUT/$1
    mkdir -p "$dir"
    PORT[$name]=$(free_port)
    case $name in
        h2o)
            printf 'listen:\n  host: 127.0.0.1\n  port: %s\nnum-threads: 1\nhttp2-idle-timeout: 300\n%s\n' \
                "${PORT[$name]}" "hosts: {default: {paths: {/: {file.dir: $DOCROOT}}}}" >"$dir/h2o.conf"
            set -- h2o -c "$dir/h2o.conf" ;;
        floor) set -- "$FLOOR_BIN" "127.0.0.1:${PORT[$name]}" "$DOCROOT/f.bin" ;;
        nghttp2) set -- "$NGHTTP2_BIN" "127.0.0.1:${PORT[$name]}" "$DOCROOT/f.bin" ;;
        tern)
            tern_conf "$dir/tern.toml" "${PORT[$name]}" "$DOCROOT" 1 $'[http2]\nprotocols = ["h2", "h2c"]'
            set -- "$TERN_BIN" serve --config "$dir/tern.toml" ;;
    esac
    setsid taskset -c 1 "$@" >"$dir/out" 2>"$dir/err" </dev/null &
    PID[$name]=$!
    BENCH_PIDS+=("$!")
    for _ in $(seq 100); do
        curl -s --http2-prior-knowledge -m 2 -o "$dir/check.bin" "http://127.0.0.1:${PORT[$name]}/f.bin" 2>/dev/null &&
            cmp -s "$dir/check.bin" "$DOCROOT/f.bin" && break
        sleep 0.1
    done
    cmp -s "$dir/check.bin" "$DOCROOT/f.bin" || bench_die "$name does not serve /f.bin over h2c (see $dir)"
    [[ $name == tern ]] && sleep 1   # its start-up calibration of static I/O
    return 0
}

RESULTS=$OUT/results.md
bench_say "# bench/h2_floor.sh, $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$ROOT" rev-parse --short HEAD)"
bench_machine_state
for s in "${SERVER_LIST[@]}"; do start "$s"; done
printf 'server\trep\trps\tserver_ticks\n' >"$OUT/runs.tsv"
for rep in $(seq "$REPS"); do
    n=${#SERVER_LIST[@]}
    for i in $(seq 0 $((n - 1))); do
        s=${SERVER_LIST[$(((i + rep) % n))]}
        log=$OUT/$s/h2load-$rep
        cpu0=$(tree_cpu_ticks "${PID[$s]}")
        taskset -c 0 timeout -k 5 $((DUR + 30)) h2load -t1 -c32 -m10 -D "$DUR" \
            "http://127.0.0.1:${PORT[$s]}/f.bin" >"$log" 2>&1 || true
        cpu1=$(tree_cpu_ticks "${PID[$s]}")
        kill -0 "${PID[$s]}" 2>/dev/null || bench_die "$s died (see $OUT/$s)"
        grep -q ' 0 failed, 0 errored' "$log" || bench_banner "$s: h2load counted failures (see $log)"
        printf '%s\t%s\t%s\t%s\n' "$s" "$rep" "$(awk '/^finished in/ { print $4 }' "$log")" $((cpu1 - cpu0)) \
            >>"$OUT/runs.tsv"
        bench_log "$s rep $rep: $(awk '/^finished in/ { print $4 " req/s" }' "$log")"
    done
done
python3 - "$OUT/runs.tsv" "$DUR" "$HZ" "$SIZE" >>"$OUT/results.md" <<'PY'
import csv, statistics, sys
runs, dur, hz, size = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = {}
for r in csv.DictReader(open(runs), delimiter="\t"):
    rps = float(r["rps"] or 0)
    us = 1e6 * int(r["server_ticks"]) / hz / (rps * dur) if rps else float("nan")
    rows.setdefault(r["server"], []).append((rps, us))
med = {s: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for s, v in rows.items()}
base = med.get("h2o")
print(f"\n{size} B over h2c, h2load -t1 -c32 -m10, server alone on CPU 1 (1 worker), client on CPU 0; "
      f"medians of {len(next(iter(rows.values())))} runs\n")
print("| server | requests/s | server CPU µs/response | × h2o requests/s |")
print("|---|---:|---:|---:|")
for s, (rps, us) in med.items():
    ratio = f"{rps / base[0]:.2f}×" if base else "—"
    print(f"| {s} | {rps:,.0f} | {us:.2f} | {ratio} |")
PY
cat "$OUT/results.md"
