#!/usr/bin/env bash
# bench/https.sh: HTTPS benchmark of tern (rustls) against nginx and h2o (both
# OpenSSL), side by side on 127.0.0.1 (issue 15), and testssl.sh against
# tern's default TLS configuration.
#
# For each key type (ECDSA P-256, RSA-2048: one self-signed certificate for
# localhost, the same file for every server), every server is up at once
# with WORKERS workers, access logs off, the same session cache and tickets
# on. Rows, per server: keep-alive requests/s for 1 KiB, 40 KiB and 1 MiB
# files; full handshakes/s (a new connection per request, 1 KiB file)
# against a second instance of each server with session resumption off
# (wrk cannot be told not to resume: it keeps the session of the
# connection it closes and offers it on the next); and resumed
# handshakes/s (a new connection per request, resuming the session of an
# earlier one: what wrk does, and tern bench without --no-resumption).
# tern's own counts of full and resumed handshakes in each handshake run
# are logged, so a row shows it measured what it says. Every row is
# measured with wrk and with tern bench (same connections, threads and
# duration), the runs interleaved per row so noise from other work on the
# machine is shared, and reported side by side with the ratios tern/nginx,
# tern/h2o and tern bench/wrk. Each row is measured REPS times, the servers'
# order and which tool goes first rotating from one repetition to the next,
# and the median is reported (one run of a server that is the bottleneck
# moves by 5-15 % from one minute to the next on the 2-CPU host).
# Then testssl.sh (Debian package testssl.sh) runs against tern with the
# default [tls] settings; findings rated above LOW or "NOT ok" are listed.
# By default the servers are pinned to CPU 0 and the load generators to CPU 1.
#
# Usage: bench/https.sh [options]      (each option also has an env variable)
#   -d, --duration S      seconds per run                    DUR=5
#   -r, --reps N          runs per row, server and tool      REPS=3
#   -c, --connections N   connections (keep-alive rows)      CONNS=32
#       --hs-connections N connections (handshake row)       HS_CONNS=8
#   -w, --workers N       server workers                     WORKERS=1
#       --keys LIST       comma list of ecdsa,rsa            KEYS=ecdsa,rsa
#       --rows LIST       comma list of 1k,40k,1m,handshakes,resumed
#                                                            ROWS=(all five)
#   -s, --servers LIST    comma list of nginx,h2o,tern       SERVERS=(all three)
#       --no-pin          do not pin                         PIN=0
#       --skip-build      do not run cargo build             SKIP_BUILD=1
#       --no-testssl      skip testssl.sh                    NO_TESTSSL=1
#   -h, --help
# Output: a table on stdout; configs, logs, raw outputs and results.tsv in
# bench/out/https-YYYYmmdd-HHMMSS/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"
# shellcheck source=bench/lib/tls_peers.sh
source "$ROOT/bench/lib/tls_peers.sh"

DUR=${DUR:-5}
REPS=${REPS:-3}
CONNS=${CONNS:-32}
HS_CONNS=${HS_CONNS:-8}
WORKERS=${WORKERS:-1}
KEYS=${KEYS:-ecdsa,rsa}
ROWS=${ROWS:-1k,40k,1m,handshakes,resumed}
SERVERS=${SERVERS:-nginx,h2o,tern}
PIN=${PIN:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
NO_TESTSSL=${NO_TESTSSL:-0}

readonly PACKAGES=(nginx h2o wrk openssl curl testssl.sh procps)

while [[ $# -gt 0 ]]; do
    case $1 in
        --hs-connections) HS_CONNS=$2; shift 2 ;;
        --keys) KEYS=$2; shift 2 ;;
        --rows) ROWS=$2; shift 2 ;;
        --no-testssl) NO_TESTSSL=1; shift ;;
        *) bench_option "duration reps connections workers servers no-pin skip-build" "$@"; shift "$BENCH_SHIFT" ;;
    esac
done
for v in DUR REPS CONNS HS_CONNS WORKERS; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
done
IFS=, read -r -a KEY_LIST <<<"$KEYS"
IFS=, read -r -a ROW_LIST <<<"$ROWS"
IFS=, read -r -a SERVER_LIST <<<"$SERVERS"

"$ROOT/scripts/ensure-packages.sh" "${PACKAGES[@]}"
bench_start_run https
bench_raise_fd_limit 4096 "the connections"
trap 'for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT

SERVER_PIN=() CLIENT_PIN=()
if [[ $PIN == 1 ]] && (($(nproc) >= 2)); then
    SERVER_PIN=(taskset -c 0) CLIENT_PIN=(taskset -c 1)
fi
bench_build_tern
((TERN_OK)) || bench_die "no tern binary"

DOCROOT=$OUT/docroot
mkdir -p "$DOCROOT"
for size in 1k:1024 40k:40960 1m:1048576; do
    head -c "${size#*:}" < <(yes 'tern https benchmark: the same bytes every run. 0123456789abcdefghijklmnopqrstuvwxyz') \
        >"$DOCROOT/${size%%:*}.bin"
done

# cert KIND: $OUT/KIND.pem and $OUT/KIND.key for localhost and 127.0.0.1.
cert() {
    local kind=$1 alg
    case $kind in
        ecdsa) alg=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
        rsa) alg=(-newkey rsa:2048) ;;
        *) bench_die "unknown key type $kind" ;;
    esac
    openssl req -x509 "${alg[@]}" -nodes -days 30 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$OUT/$kind.key" -out "$OUT/$kind.pem" 2>/dev/null
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_https() {
    local port=$1 i
    for i in $(seq 1 100); do
        curl -sk -o /dev/null "https://127.0.0.1:$port/1k.bin" && return 0
        sleep 0.1
    done
    bench_die "nothing answers on https port $port (see $OUT)"
}

# start_SERVER KIND PORT RESUME(0|1): the server with KIND's certificate on
# PORT, session resumption (cache and tickets) on or off.
start_nginx() {
    local kind=$1 port=$2 resume=$3
    local dir=$OUT/nginx-$kind-$resume
    mkdir -p "$dir"
    nginx_tls_conf "$dir" "$port" "$OUT/$kind.pem" "$OUT/$kind.key" "$DOCROOT" "$WORKERS" "$resume"
    "${SERVER_PIN[@]}" nginx -c "$dir/nginx.conf" -p "$dir" >"$dir/stdout.log" 2>&1 &
    BENCH_PIDS+=($!)
}

start_h2o() {
    local kind=$1 port=$2 resume=$3
    local dir=$OUT/h2o-$kind-$resume
    mkdir -p "$dir"
    h2o_tls_conf "$dir" "$port" "$OUT/$kind.pem" "$OUT/$kind.key" "$DOCROOT" "$WORKERS" "$resume"
    "${SERVER_PIN[@]}" h2o -c "$dir/h2o.conf" >"$dir/stdout.log" 2>&1 &
    BENCH_PIDS+=($!)
}

start_tern() {
    local kind=$1 port=$2 resume=$3 cache=4096 tickets=true
    local dir=$OUT/tern-$kind-$resume
    ((resume)) || cache=0 tickets=false
    mkdir -p "$dir"
    TERN_STATUS[$resume]=$(free_port)
    tern_tls_conf "$dir/tern.toml" "${TERN_STATUS[$resume]}" "$port" "$OUT/$kind.pem" "$OUT/$kind.key" "$DOCROOT" \
        "$WORKERS" "session_cache = $cache"$'\n'"tickets = $tickets"
    "${SERVER_PIN[@]}" "$TERN_BIN" serve --config "$dir/tern.toml" >"$dir/stdout.log" 2>"$dir/stderr.log" &
    BENCH_PIDS+=($!)
}

# tern_handshakes RESUME: tern's counts so far, "FULL RESUMED", from the
# status page of the instance with resumption RESUME.
tern_handshakes() {
    curl -s "http://127.0.0.1:${TERN_STATUS[$1]}/_tern/status" |
        python3 -c 'import json,sys; h=json.load(sys.stdin)["tls"]["handshakes"]; print(h["full"], h["resumed"])'
}

# run_wrk PORT PATH CONNS HANDSHAKE(0|1): requests/s.
run_wrk() {
    local port=$1 path=$2 conns=$3 hs=$4 extra=() out
    ((hs)) && extra=(-H "Connection: close")
    out=$("${CLIENT_PIN[@]}" wrk -t1 -c"$conns" -d"${DUR}s" "${extra[@]}" "https://127.0.0.1:$port$path" 2>&1) || true
    echo "$out" >>"$OUT/wrk.log"
    awk '/^Requests\/sec:/ {print $2}' <<<"$out"
}

# run_bench PORT PATH CONNS HANDSHAKE(0|1: full|2: resumed): requests/s.
run_bench() {
    local port=$1 path=$2 conns=$3 hs=$4 extra=() out
    ((hs)) && extra=(--no-keepalive)
    ((hs == 1)) && extra+=(--no-resumption)
    out=$("${CLIENT_PIN[@]}" "$TERN_BIN" bench -t1 -c"$conns" -d"${DUR}s" --insecure --json "${extra[@]}" \
        "https://localhost:$port$path" 2>>"$OUT/bench.log") || true
    echo "$out" >>"$OUT/bench.jsonl"
    python3 -c 'import json,sys; print(round(json.loads(sys.stdin.read())["requests_per_s"], 1))' <<<"$out" 2>/dev/null || echo 0
}

RESULTS=$OUT/results.tsv
printf 'key\trow\tserver\trep\twrk_rps\ttern_bench_rps\n' >"$RESULTS"
{
    printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf 'git_commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    printf 'nproc\t%s\n' "$(nproc)"
    printf 'loadavg_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf 'nginx\t%s\n' "$(nginx -v 2>&1 | head -n1)"
    printf 'h2o\t%s\n' "$(h2o --version 2>&1 | head -n1)"
    printf 'openssl\t%s\n' "$(openssl version)"
    printf 'settings\t%s runs of %ss, %s connections (handshakes: %s), %s worker(s), pinning %s, rows %s, servers %s\n' \
        "$REPS" "$DUR" "$CONNS" "$HS_CONNS" "$WORKERS" "$( ((${#SERVER_PIN[@]})) && echo on || echo off)" "$ROWS" "$SERVERS"
} >"$OUT/meta.tsv"

declare -A TERN_STATUS=()
for kind in "${KEY_LIST[@]}"; do
    cert "$kind"
    # PORTS[SERVER-RESUME]: one instance with session resumption, one without.
    declare -A PORTS=()
    for s in "${SERVER_LIST[@]}"; do
        for resume in 1 0; do
            PORTS[$s-$resume]=$(free_port)
            "start_$s" "$kind" "${PORTS[$s-$resume]}" "$resume"
        done
    done
    for p in "${PORTS[@]}"; do wait_https "$p"; done
    for row in "${ROW_LIST[@]}"; do
        path=/$row.bin conns=$CONNS hs=0 resume=1
        case $row in
            handshakes) path=/1k.bin conns=$HS_CONNS hs=1 resume=0 ;;
            resumed) path=/1k.bin conns=$HS_CONNS hs=2 ;;
        esac
        for ((rep = 0; rep < REPS; rep++)); do
            n=${#SERVER_LIST[@]}
            for ((i = 0; i < n; i++)); do
                s=${SERVER_LIST[(i + rep) % n]}
                bench_log "$kind $row $s (run $((rep + 1)) of $REPS)"
                port=${PORTS[$s-$resume]} counts= w= b=
                [[ $s == tern ]] && ((hs)) && counts=$(tern_handshakes "$resume")
                # Which tool goes first alternates between runs.
                tools=(wrk "tern bench")
                ((rep % 2)) && tools=("tern bench" wrk)
                for tool in "${tools[@]}"; do
                    if [[ $tool == wrk ]]; then
                        w=$(run_wrk "$port" "$path" "$conns" "$hs")
                    else
                        b=$(run_bench "$port" "$path" "$conns" "$hs")
                    fi
                    [[ -n $counts ]] && counts="$counts $(tern_handshakes "$resume")"
                done
                if [[ -n $counts ]]; then
                    # Counts before, between and after the two tools' runs.
                    read -r f0 r0 f1 r1 f2 r2 <<<"$counts"
                    bench_log "tern's handshakes (full, resumed): ${tools[0]} $((f1 - f0)), $((r1 - r0)); ${tools[1]} $((f2 - f1)), $((r2 - r1))"
                fi
                printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$row" "$s" "$rep" "${w:-0}" "${b:-0}" >>"$RESULTS"
            done
        done
    done
    for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    BENCH_PIDS=()
done
printf 'loadavg_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.tsv"

python3 - "$RESULTS" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
runs = {}
for r in rows:
    runs.setdefault((r["key"], r["row"]), {}).setdefault(r["server"], ([], []))
    w, b = runs[(r["key"], r["row"])][r["server"]]
    w.append(float(r["wrk_rps"] or 0))
    b.append(float(r["tern_bench_rps"] or 0))
# Medians of the runs.
table = {k: {s: (statistics.median(w), statistics.median(b)) for s, (w, b) in v.items()} for k, v in runs.items()}
def ratio(a, b):
    return f"{a / b:.2f}" if b else "-"
print(f"Medians of {len(next(iter(next(iter(runs.values())).values()))[0])} runs.")
print()
print("| key | row | tool | nginx req/s | h2o req/s | tern req/s | tern/nginx | tern/h2o |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for (key, row), s in table.items():
    for i, tool in enumerate(["wrk", "tern bench"]):
        n, h, t = (s.get(x, (0, 0))[i] for x in ("nginx", "h2o", "tern"))
        print(f"| {key} | {row} | {tool} | {n:.0f} | {h:.0f} | {t:.0f} | {ratio(t, n)} | {ratio(t, h)} |")
print()
print("| key | row | server | tern bench / wrk | wrk runs | tern bench runs |")
print("|---|---|---|---:|---|---|")
for (key, row), s in table.items():
    for server, (w, b) in s.items():
        ws, bs = (", ".join(f"{x:.0f}" for x in xs) for xs in runs[(key, row)][server])
        print(f"| {key} | {row} | {server} | {ratio(b, w)} | {ws} | {bs} |")
EOF

if [[ $NO_TESTSSL != 1 ]]; then
    cert ecdsa
    port=$(free_port)
    start_tern ecdsa "$port" 1
    wait_https "$port"
    bench_log "testssl.sh against tern's default TLS settings (port $port)"
    testssl --quiet --color 0 --warnings off --jsonfile "$OUT/testssl.json" "127.0.0.1:$port" >"$OUT/testssl.txt" 2>&1 || true
    python3 - "$OUT/testssl.json" <<'EOF'
import json, sys
findings = json.load(open(sys.argv[1]))
bad = [f for f in findings if f.get("severity") in ("MEDIUM", "HIGH", "CRITICAL") or "NOT ok" in f.get("finding", "")]
print(f"testssl.sh: {len(findings)} findings, {len(bad)} rated MEDIUM or worse or NOT ok")
for f in bad:
    print(f"  {f['id']}: {f['severity']}: {f['finding']}")
EOF
fi
bench_log "results in $OUT"
