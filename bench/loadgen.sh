#!/usr/bin/env bash
# tern bench vs wrk: the same server (nginx, or tern with its default config),
# the same 1 KiB file, the same -t/-c/-d, one tool after the other, RUNS times
# each (interleaved). Prints each run's request rate and CPU time per request,
# the medians, the ratios, and the CPU used by everything else meanwhile.
#
# Target (SPEC §3): tern bench >= 1.0x wrk's request rate, <= 1.0x its CPU
# per request. CPU is the tool's user+sys time as reported by bash's `time`
# (getrusage of the child), divided by the requests it completed.
#
# Usage: bench/loadgen.sh   (env: SERVER THREADS CONNS DURATION RUNS NGINX_WORKERS PIN)
#   SERVER=nginx THREADS=1 CONNS=50 DURATION=5 RUNS=3 NGINX_WORKERS=1 PIN=1 by default.
#   SERVER=tern loads `tern serve` (static.io "auto", access log off) with
#   NGINX_WORKERS workers instead.
#   PIN=1 puts the server on the last CPU and the generator on CPU 0 (2+ CPUs),
#   so the two tools see the same server and the same spare core; PIN=0 lets
#   the scheduler place both.
set -euo pipefail

SERVER=${SERVER:-nginx}
THREADS=${THREADS:-1}
CONNS=${CONNS:-50}
DURATION=${DURATION:-5}
RUNS=${RUNS:-3}
NGINX_WORKERS=${NGINX_WORKERS:-1}
PIN=${PIN:-1}

repo=$(cd "$(dirname "$0")/.." && pwd)

# --- tools -----------------------------------------------------------------
missing=()
for pkg in wrk nginx; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

echo "building tern (release)" >&2
(cd "$repo" && cargo build --release -q -p tern)
TERN="${CARGO_TARGET_DIR:-$repo/target}/release/tern"

# --- nginx serving a 1 KiB file ---------------------------------------------
tmp=$(mktemp -d)
server_pid=
cleanup() {
    [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$tmp/www" "$tmp/logs"
chmod 755 "$tmp" "$tmp/www" # nginx workers run as an unprivileged user
head -c 1024 /dev/zero | tr '\0' 'a' >"$tmp/www/1k.html"
cat >"$tmp/nginx.conf" <<EOF
worker_processes $NGINX_WORKERS;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    sendfile on;
    open_file_cache max=16;
    client_body_temp_path $tmp/body;
    proxy_temp_path $tmp/proxy;
    fastcgi_temp_path $tmp/fastcgi;
    uwsgi_temp_path $tmp/uwsgi;
    scgi_temp_path $tmp/scgi;
    server {
        listen 127.0.0.1:$port;
        root $tmp/www;
    }
}
EOF

cpus=$(nproc)
server_pin=() gen_pin=()
if [[ $PIN == 1 && $cpus -ge 2 ]]; then
    server_pin=(taskset -c $((cpus - 1)))
    gen_pin=(taskset -c 0)
fi
case $SERVER in
    nginx) "${server_pin[@]}" "$NGINX" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/logs/error.log" & ;;
    tern) "${server_pin[@]}" "$TERN" serve "$tmp/www" --listen "127.0.0.1:$port" --workers "$NGINX_WORKERS" \
              --access-log off 2>"$tmp/logs/error.log" & ;;
    *) echo "SERVER must be nginx or tern (got '$SERVER')" >&2; exit 2 ;;
esac
server_pid=$!
url="http://127.0.0.1:$port/1k.html"
for _ in $(seq 50); do
    curl -fs -o /dev/null "$url" && break
    sleep 0.1
done
curl -fs -o /dev/null "$url" || { echo "$SERVER does not serve $url" >&2; tail -5 "$tmp/logs/error.log" >&2; exit 1; }

# --- runs --------------------------------------------------------------------
# cpu_of CMD...: runs CMD with its output in $tmp/out, prints "user+sys" seconds.
cpu_of() {
    local TIMEFORMAT='%3U %3S'
    { time "$@" >"$tmp/out" 2>"$tmp/err"; } 2>"$tmp/time"
    awk '{ printf "%.3f", $1 + $2 }' "$tmp/time"
}

# Busy CPU ticks of the whole machine, and of the server's process tree.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
server_ticks() {
    local t=0 p
    for p in $server_pid $(pgrep -P "$server_pid"); do
        t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
# measured CMD...: runs the tool; sets cpu (its user+sys s), others (cores
# used meanwhile by everything but the tool and the server).
measured() {
    local b0 s0 t0 b1 s1 t1
    b0=$(busy_ticks) s0=$(server_ticks) t0=$(date +%s.%N)
    cpu=$(cpu_of "$@")
    b1=$(busy_ticks) s1=$(server_ticks) t1=$(date +%s.%N)
    others=$(awk -v b=$((b1 - b0)) -v s=$((s1 - s0)) -v c="$cpu" -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
        -v hz="$(getconf CLK_TCK)" 'BEGIN { o = (b - s) / hz - c; printf "%.2f", (o > 0 ? o : 0) / w }')
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run_wrk() {
    local cpu reqs others
    measured timeout -k 5 $((DURATION + 20)) "${gen_pin[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" "$url"
    wothers=$others
    reqs=$(awk '/requests in/ { print $1 }' "$tmp/out")
    rate=$(awk '/Requests\/sec/ { print $2 }' "$tmp/out")
    errs=$(awk '/Socket errors|Non-2xx/ { printf "%s ", $0 }' "$tmp/out")
    wcpu=$(awk -v c="$cpu" -v n="$reqs" 'BEGIN { printf "%.3f", c * 1e6 / n }')
}

run_tern() {
    local cpu reqs others
    measured timeout -k 5 $((DURATION + 20)) "${gen_pin[@]}" "$TERN" bench -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --json "$url"
    tothers=$others
    reqs=$(jq '.requests' "$tmp/out")
    trate=$(jq '.requests_per_s' "$tmp/out")
    terrs=$(jq -r '.errors | to_entries | map(select(.value > 0) | "\(.key) \(.value)") | join(" ")' "$tmp/out")
    tcpu=$(awk -v c="$cpu" -v n="$reqs" 'BEGIN { printf "%.3f", c * 1e6 / n }')
    twait=$(jq -r '[.generator.threads[].waiting // 0] | max * 100 | floor' "$tmp/out")
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
wrk_rates=() wrk_cpus=() tern_rates=() tern_cpus=()
rows=()
for run in $(seq "$RUNS"); do
    # Alternate which tool goes first, so a drift in the machine's load
    # does not always favour the same one.
    if ((run % 2)); then run_wrk; run_tern; else run_tern; run_wrk; fi
    wrk_rates+=("$rate") wrk_cpus+=("$wcpu")
    tern_rates+=("$trate") tern_cpus+=("$tcpu")
    rows+=("$(printf '| %d | %.0f | %s | %s | %.0f | %s | %s | %s%% |' "$run" "$rate" "$wcpu" "$wothers" "$trate" "$tcpu" "$tothers" "$twait")")
    if [[ -n $errs || -n $terrs ]]; then
        echo "run $run errors: wrk: ${errs:-none}; tern: ${terrs:-none}" >&2
    fi
done

wr=$(median "${wrk_rates[@]}") wc=$(median "${wrk_cpus[@]}")
tr=$(median "${tern_rates[@]}") tc=$(median "${tern_cpus[@]}")

echo
server_name=$([[ $SERVER == nginx ]] && echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*\///')" || echo "tern serve (default config)")
echo "tern $(git -C "$repo" rev-parse --short HEAD 2>/dev/null), wrk $(wrk -v 2>&1 | head -1 | cut -d" " -f2), against $server_name, $NGINX_WORKERS worker(s); 1 KiB file; -t$THREADS -c$CONNS -d${DURATION}s; $cpus CPUs$([[ ${#gen_pin[@]} -gt 0 ]] && echo ", generator on CPU 0, server on CPU $((cpus - 1))" || echo ", not pinned")"
echo
echo "| run | wrk req/s | wrk CPU µs/req | others (cores) | tern bench req/s | tern bench CPU µs/req | others (cores) | tern bench waited for a CPU |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
printf '| median | %.0f | %s | | %.0f | %s | | |\n' "$wr" "$wc" "$tr" "$tc"
echo
echo "load average before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
awk -v tr="$tr" -v wr="$wr" -v tc="$tc" -v wc="$wc" 'BEGIN {
    printf "rate ratio tern/wrk: %.3f (target >= 1.0)\n", tr / wr
    printf "CPU per request ratio tern/wrk: %.3f (target <= 1.0)\n", tc / wc
}'
