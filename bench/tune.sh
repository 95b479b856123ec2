#!/usr/bin/env bash
# bench/tune.sh: checks what `tern tune` chose (issue 11) - the tuned
# configuration against the default one, side by side on 127.0.0.1.
#
# 1. `tern tune` (the whole battery; --quick for the short one) writes
#    tuned.toml, its runs stored in bench/out/tune-<time>/lab.sqlite
#    (or --tuned FILE takes a configuration tuned before).
# 2. Two servers up at once on the same site: `tern serve` with no
#    configuration (the defaults) and with tuned.toml (unchanged, except
#    cgi.allow_root when run as root, so the CGI workload can run).
#    Each server is started once the one before has decided how it sends
#    static files (the default's start-up calibration, a fraction of a
#    second), so no calibration measures while another runs.
# 3. For every steady workload the battery judges its choices on (the same
#    list as tern tune's, crates/tern-experiments/src/tune/batteries.rs) - static
#    files of 1 KiB, 16 KiB, 64 KiB, 256 KiB and 1 MiB (io, read_chunk,
#    model), a CGI program sending 1 MiB (pipe_buffer, model), the
#    41,518-byte HTML page with gzip, br and zstd, from the compression
#    cache (levels, model) - wrk -tT -cC -dD --latency against each server
#    in turn, the order alternating from one repetition to the next, REPS
#    times: the median requests/s and p99 of each, the ratio tuned/default,
#    and the share of the machine's CPU that was busy during the runs (the
#    servers, wrk and anything else). tern tune judges at 4 connections
#    too, and two things this check does not measure: the levels on a page
#    compressed anew for every response (bytes saved per second) and the
#    adaptive thresholds on a cold burst of distinct pages.
#
# Run it on a quiet machine: other work moves the figures (the busy share
# says how much there was).
#
# Usage: bench/tune.sh [options]      (each option also has an env variable)
#   --quick                 `tern tune --quick`                QUICK=1
#   --tuned FILE            use FILE, do not run `tern tune`   TUNED=FILE
#   -d, --duration S        wrk seconds per run                DUR=10
#   -c, --connections N     wrk connections                    CONNS=64
#   -t, --threads N         wrk threads                        THREADS=1
#   -r, --reps N            repetitions (medians reported)     REPS=5
#       --skip-build        do not run cargo build             SKIP_BUILD=1
#   -h, --help
# Output: a table on stdout; configs, logs, raw wrk output and results.json
# in bench/out/tune-YYYYmmdd-HHMMSS/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

QUICK=${QUICK:-0}
TUNED=${TUNED:-}
DUR=${DUR:-10}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
REPS=${REPS:-5}
SKIP_BUILD=${SKIP_BUILD:-0}

while (($#)); do
    case $1 in
        --quick) QUICK=1; shift ;;
        --tuned) TUNED=${2:?--tuned needs a file}; shift 2 ;;
        *) bench_option "duration connections threads reps skip-build" "$@"; shift "$BENCH_SHIFT" ;;
    esac
done
[[ -z $TUNED || -f $TUNED ]] || bench_die "--tuned $TUNED: no such file"

"$ROOT/scripts/ensure-packages.sh" wrk curl python3 procps iproute2
bench_start_run tune
bench_build_tern
((TERN_OK)) || exit 1
trap stop_all EXIT

{
    echo "start: $(date -u '+%F %T UTC'); uptime:$(uptime)"
    echo "cpus: $(nproc); DUR=$DUR CONNS=$CONNS THREADS=$THREADS REPS=$REPS QUICK=$QUICK"
} | tee "$OUT/machine.txt" >&2

if [[ -z $TUNED ]]; then
    args=(tune -o "$OUT/tuned.toml" --store "$OUT/lab.sqlite")
    ((QUICK)) && args+=(--quick)
    bench_log "tern ${args[*]} (log: $OUT/tune.log)"
    "$TERN_BIN" "${args[@]}" 2>"$OUT/tune.log" || { tail -n 20 "$OUT/tune.log" >&2; bench_die "tern tune failed"; }
else
    cp "$TUNED" "$OUT/tuned.toml"
fi

# The site: files of each size, a page, a CGI program.
SITE=$OUT/site
mkdir -p "$SITE/cgi-bin"
declare -A SIZE_BYTES=([1k]=1024 [16k]=16384 [64k]=65536 [256k]=262144 [1m]=1048576)
for s in "${!SIZE_BYTES[@]}"; do head -c "${SIZE_BYTES[$s]}" /dev/urandom >"$SITE/$s.bin"; done
python3 "$ROOT/bench/lib/compression_pages.py" "$SITE" >/dev/null
head -c 1048576 /dev/urandom >"$OUT/cgi-output.bin"
printf '#!/bin/sh\nprintf '"'"'Content-Type: application/octet-stream\\r\\n\\r\\n'"'"'\nexec cat %s\n' \
    "$OUT/cgi-output.bin" >"$SITE/cgi-bin/out.sh"
chmod 755 "$SITE/cgi-bin/out.sh"

# Root may run the CGI program only with cgi.allow_root.
allow_root() {
    if [[ $(id -u) != 0 ]]; then cat; return; fi
    python3 -c '
import sys
text = sys.stdin.read()
lines = text.splitlines()
if "[cgi]" in lines:
    i = lines.index("[cgi]")
    lines.insert(i + 1, "allow_root = true")
    print("\n".join(lines))
else:
    print(text + "\n[cgi]\nallow_root = true")'
}
: | allow_root >"$OUT/default.toml"
allow_root <"$OUT/tuned.toml" >"$OUT/tuned-run.toml"

declare -A PORT PID
for which in default tuned; do
    conf=$OUT/default.toml
    [[ $which == tuned ]] && conf=$OUT/tuned-run.toml
    PORT[$which]=$(free_port)
    "$TERN_BIN" serve "$SITE" --listen "127.0.0.1:${PORT[$which]}" --access-log off --config "$conf" \
        2>"$OUT/$which.log" &
    PID[$which]=$!
    BENCH_PIDS+=("${PID[$which]}")
    wait_http "http://127.0.0.1:${PORT[$which]}/1k.bin" "${PID[$which]}" 20 || bench_die "tern ($which) did not start"
    # Until its start-up calibration (if any) has decided.
    wait_calibrated "http://127.0.0.1:${PORT[$which]}" "$OUT/$which-status-before.json" || true
    python3 -c 'import json, sys; io = json.load(open(sys.argv[1]))["io"]
print(sys.argv[2] + ": static.io " + io["mode"] + ", " + io["source"] + ": " + ", ".join(c["class"] + " " + c["method"] for c in io["classes"]))' \
        "$OUT/$which-status-before.json" "$which" | tee -a "$OUT/machine.txt" >&2
done

# name|path|header
WORKLOADS=(
    "1KiB|/1k.bin|"
    "16KiB|/16k.bin|"
    "64KiB|/64k.bin|"
    "256KiB|/256k.bin|"
    "1MiB|/1m.bin|"
    "cgi 1MiB|/cgi-bin/out.sh|"
    "page gzip|/page-41518.html|Accept-Encoding: gzip"
    "page br|/page-41518.html|Accept-Encoding: br"
    "page zstd|/page-41518.html|Accept-Encoding: zstd"
)
: >"$RUNS"
for w in "${WORKLOADS[@]}"; do
    IFS='|' read -r name path header <<<"$w"
    for rep in $(seq 1 "$REPS"); do
        order=(default tuned)
        ((rep % 2 == 0)) && order=(tuned default)
        for which in "${order[@]}"; do
            file=$OUT/wrk-${name// /-}-$which-$rep.txt
            h=()
            [[ -n $header ]] && h=(-H "$header")
            cpu0=$(tree_cpu_ticks "${PID[$which]}")
            busy0=$(system_busy_ticks)
            t0=$(date +%s.%N)
            wrk -t"$THREADS" -c"$CONNS" -d"${DUR}s" --latency "${h[@]}" \
                "http://127.0.0.1:${PORT[$which]}$path" >"$file" 2>&1 || true
            t1=$(date +%s.%N)
            printf '{"workload": "%s", "server": "%s", "rep": %d, "wrk": "%s", "server_ticks": %d, "busy_ticks": %d, "seconds": %s}\n' \
                "$name" "$which" "$rep" "$file" $(($(tree_cpu_ticks "${PID[$which]}") - cpu0)) \
                $(($(system_busy_ticks) - busy0)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" >>"$RUNS"
        done
    done
done
echo "end: $(date -u '+%F %T UTC'); uptime:$(uptime)" | tee -a "$OUT/machine.txt" >&2

python3 - "$OUT" "$ROOT/bench/lib" <<'EOF'
import json, os, statistics, sys
out, lib = sys.argv[1], sys.argv[2]
sys.path.insert(0, lib)
import wrk

tick = os.sysconf("SC_CLK_TCK")
cpus = os.cpu_count()
runs = [json.loads(l) for l in open(f"{out}/runs.jsonl")]
rows, results = [], []
for name in dict.fromkeys(r["workload"] for r in runs):
    fig = {}
    for which in ("default", "tuned"):
        mine = [r for r in runs if r["workload"] == name and r["server"] == which]
        parsed = [wrk.parse(r["wrk"]) for r in mine]
        bad = [p["problems"] or p["non_2xx_3xx"] or sum(p["socket_errors"].values()) for p in parsed]
        rps = statistics.median([p["rps"] or 0.0 for p in parsed])
        p99 = statistics.median([p["p99_us"] or 0.0 for p in parsed])
        reqs = sum(p["requests"] or 0 for p in parsed)
        cpu_us = sum(r["server_ticks"] for r in mine) / tick * 1e6 / reqs if reqs else 0.0
        busy = sum(r["busy_ticks"] for r in mine) / tick / (sum(r["seconds"] for r in mine) * cpus)
        fig[which] = {"rps": rps, "p99_us": p99, "cpu_us_per_request": cpu_us, "busy": busy,
                      "failed_runs": sum(1 for b in bad if b)}
    ratio = fig["tuned"]["rps"] / fig["default"]["rps"] if fig["default"]["rps"] else 0.0
    results.append({"workload": name, "default": fig["default"], "tuned": fig["tuned"], "ratio": ratio})
    rows.append((name, fig["default"]["rps"], fig["tuned"]["rps"], ratio, fig["default"]["p99_us"] / 1e3,
                 fig["tuned"]["p99_us"] / 1e3, fig["default"]["cpu_us_per_request"], fig["tuned"]["cpu_us_per_request"],
                 max(fig["default"]["busy"], fig["tuned"]["busy"]),
                 fig["default"]["failed_runs"] + fig["tuned"]["failed_runs"]))
json.dump(results, open(f"{out}/results.json", "w"), indent=1)
print(f"{'workload':<10} {'default r/s':>12} {'tuned r/s':>12} {'ratio':>6} {'p99 ms d/t':>13} {'cpu us/req d/t':>15} {'busy':>5} {'failed':>6}")
for n, d, t, r, pd, pt, cd, ct, busy, failed in rows:
    print(f"{n:<10} {d:>12.0f} {t:>12.0f} {r:>5.2f}x {pd:>6.2f}/{pt:<6.2f} {cd:>7.1f}/{ct:<7.1f} {busy:>4.0%} {failed:>6}")
EOF
echo "tuned configuration: $OUT/tuned.toml; raw results: $OUT"
