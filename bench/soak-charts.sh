#!/usr/bin/env bash
# bench/soak-charts.sh: the time-series charts of a soak (bench/soak.sh),
# drawn by the lab's dashboard. The soak stores one lab run per minute and
# per server (kind "soak"); this serves the store with `tern lab serve` on a
# free loopback port, and headless Chromium takes each metric's x-y chart
# against time, over that soak's runs only, as a PNG:
# DIR/charts/SERVER-METRIC.png (request rate, p99, RSS, anonymous memory,
# descriptors, threads, child processes).
#
# Usage: bench/soak-charts.sh DIR [SERVER...]   (default: every server the
#   soak imported: DIR/SERVER-lab-import.txt)
#   env: TERN_BIN (default target/release/tern), STORE (the lab store the
#   soak imported into; default the user's)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

(($#)) || bench_die "usage: bench/soak-charts.sh DIR [SERVER...]"
DIR=$1
shift
TERN_BIN=${TERN_BIN:-$ROOT/target/release/tern}
[[ -x $TERN_BIN ]] || bench_die "no tern binary at $TERN_BIN (cargo build --release, or set TERN_BIN)"
command -v chromium >/dev/null || "$ROOT/scripts/ensure-packages.sh" chromium
SERVERS=("$@")
if ((${#SERVERS[@]} == 0)); then
    for f in "$DIR"/*-lab-import.txt; do
        [[ -e $f ]] && SERVERS+=("$(basename "$f" -lab-import.txt)")
    done
fi
((${#SERVERS[@]})) || bench_die "$DIR: no SERVER-lab-import.txt (the soak did not store its runs)"
METRICS=(soak_rate soak_p99 soak_rss soak_anon soak_fds soak_threads soak_children)

trap stop_all EXIT
store=()
[[ -n ${STORE:-} ]] && store=(--store "$STORE")
log=$(mktemp)
"$TERN_BIN" lab serve --listen 127.0.0.1:0 "${store[@]}" >"$log" 2>&1 &
BENCH_PIDS+=($!)
base=""
for _ in $(seq 100); do
    base=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' "$log" || true)
    [[ -n $base ]] && break
    sleep 0.1
done
[[ -n $base ]] || bench_die "tern lab serve did not start: $(cat "$log")"

mkdir -p "$DIR/charts"
for server in "${SERVERS[@]}"; do
    # "imported N runs as ID ID ...": this soak's runs of that server.
    read -ra ids <<<"$(sed -n 's/^imported [0-9]* runs as //p' "$DIR/$server-lab-import.txt")"
    ((${#ids[@]})) || bench_die "$DIR/$server-lab-import.txt names no run"
    runs=$(printf '&run=%s' "${ids[@]}")
    for metric in "${METRICS[@]}"; do
        png=$DIR/charts/$server-${metric#soak_}.png
        profile=$(mktemp -d)
        timeout 90 chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
            --disable-component-update --disable-sync --hide-scrollbars --window-size=1100,760 \
            --user-data-dir="$profile" --screenshot="$png" \
            "${base}chart?metric=$metric&view=xy-time$runs" >/dev/null 2>&1 || bench_log "chromium failed for $metric"
        rm -rf "$profile"
        [[ -s $png ]] && echo "$png"
    done
done
