#!/usr/bin/env bash
# bench/soak.sh: a soak with faults (issue 35). Mixed open-loop load at
# LOAD_SHARE (60 %) of the capacity a short closed-loop calibration measures,
# for the whole duration, while faults hit the server on a schedule; one
# sample a second; a judgement at the end. Then the same against nginx +
# php-fpm (the peer) for the faults that apply.
#
# The load (`tern bench --mix`, one process per client class, restarted every
# minute so its per-request timelines stay small): static files 1 KiB-4 MiB
# with ranges and conditionals, a compressible page asked gzip, the C CGI
# (gateway/hello.cgi), PHP through php-fpm, files through the reverse proxy
# from an upstream (a second tern); HTTPS, over HTTP/1.1 and over HTTP/2
# (`tern bench --h2`, h2 by ALPN, several streams per connection); clients in a network
# namespace behind a veth pair with `tc netem` delay, loss and reordering;
# a trickle of slow readers (bench/lib/slowread.py) and of the hostile corpus
# (../shared/http1-corpus).
#
# The faults, each logged with its time ($OUT/SERVER-faults.csv): a reload
# every 30 s alternating two configurations (checked by a header); php-fpm
# killed and restarted; the proxy's upstream killed and restarted; a CGI
# that crashes mid-body and one that hangs past
# cgi.timeout; a document-root file truncated and replaced; the access log's
# tmpfs filled, then freed; the descriptor limit (RLIMIT_NOFILE) reached by a
# burst of held connections. --short: 60 s, every fault once; otherwise the
# faults repeat every 5 minutes.
#
# Recorded ($OUT/SERVER-soak.csv, one row a second, and the lab store: one
# run per minute, kind "soak", so `tern lab serve`'s x-y against time charts
# them): completed requests, failures by cause, p99, RSS and anonymous
# memory, descriptors, threads, child processes and zombies, the compressed
# cache's bytes, lines lost by the access log, the workers' tick ages (the
# watchdog), the access log's lines against the load generator's responses.
#
# Judged (a table; exit 1 when a check of tern fails): every failure
# attributed to its fault; access-log lines = responses outside the
# disk-full window, and the lost lines counted; RSS and descriptor slopes
# < 1 %/h after warm-up (runs of 10 minutes or more), descriptors back to
# baseline and RSS back under 110 % of its warm value after the load; no
# zombie; no worker stalled.
#
# Usage: bench/soak.sh [--short] [--duration 1h|30m|600] [--no-peer | --servers tern,nginx] [--skip-build]
#   env: WORKERS=2 LOAD_SHARE=0.6 NOFILE=1024 (tern's descriptor limit; each of nginx's
#   WORKERS workers gets NOFILE / WORKERS), TERN_BIN (a tern binary to use instead of
#   building the release one: scripts/test.sh passes the debug one cargo test built)
# Needs root (tmpfs, network namespace); installs what it needs through
# scripts/ensure-packages.sh. Servers listen on 127.0.0.1 and the veth's
# private address only; everything started is stopped by its PID, the
# tmpfs and the namespace are removed on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

WORKERS=${WORKERS:-2}
LOAD_SHARE=${LOAD_SHARE:-0.6}
NOFILE=${NOFILE:-1024}
DUR=1h
SHORT=0
SERVERS=tern,nginx
while (($#)); do
    case $1 in
        --short) SHORT=1; DUR=60; shift ;;
        --no-peer) SERVERS=tern; shift ;;
        *) bench_option "duration servers skip-build" "$@"; shift "$BENCH_SHIFT" ;;
    esac
done
case $DUR in
    *h) DUR=$((${DUR%h} * 3600)) ;;
    *m) DUR=$((${DUR%m} * 60)) ;;
    *s) DUR=${DUR%s} ;;
esac
[[ $DUR =~ ^[0-9]+$ ]] && ((DUR >= 60)) || bench_die "--duration: at least 60 s (1h, 30m, 600)"
# --short: 20 s load runs, so some are clear of the disk-full window.
((SHORT)) && SEG=20 || SEG=60
((SHORT)) && CYCLE=60 || CYCLE=300
((SHORT)) && WINDOW=10 || WINDOW=60
((SHORT)) && CAL=4 || CAL=10
[[ $(id -u) == 0 ]] || bench_die "needs root (tmpfs, network namespace, tc)"

PACKAGES=(curl python3 gcc make openssl php-fpm iproute2 nftables procps util-linux)
[[ ,$SERVERS, == *,nginx,* ]] && PACKAGES+=(nginx)
"$ROOT/scripts/ensure-packages.sh" "${PACKAGES[@]}"
bench_raise_fd_limit $((NOFILE * 2 + 1000)) "the held connections"
bench_start_run soak
SOAK_PY=$ROOT/bench/lib/soak.py
CORPUS=$ROOT/../shared/http1-corpus
NS=tsoak$$
VETH_H=tsh$$
VETH_N=tsn$$
NET=10.$((200 + $$ % 50)).$(($$ / 50 % 250))
LOGFS=$OUT/logfs
cleanup() {
    set +e
    stop_all
    if mountpoint -q "$LOGFS"; then umount "$LOGFS" || umount -l "$LOGFS"; fi
    ip netns del "$NS" 2>/dev/null
    ip link del "$VETH_H" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${TERN_BIN:-} ]]; then
    [[ -x $TERN_BIN ]] || bench_die "TERN_BIN=$TERN_BIN is not an executable"
else
    bench_build_tern
    ((TERN_OK)) || exit 1
fi
make -C "$ROOT/gateway" >"$OUT/gateway-build.log" 2>&1 || bench_die "make -C gateway failed (see $OUT/gateway-build.log)"

# ------------------------------------------------------------------ content
WWW=$OUT/www
mkdir -p "$WWW/cgi-bin"
for size in 1k:1024 64k:65536 1m:1048576 4m:4194304 victim:1048576; do
    head -c "${size#*:}" /dev/urandom >"$WWW/${size%%:*}.bin"
done
python3 -c 'import random; random.seed(35)
words = "the server answers every request it can and counts what it cannot".split()
print("<html><body>" + " ".join(random.choice(words) for _ in range(6000)) + "</body></html>")' >"$WWW/page.html"
touch -d '2026-01-01 00:00:00 UTC' "$WWW/64k.bin" "$WWW/page.html"
IMS='If-Modified-Since: Thu, 01 Jan 2026 00:00:00 GMT'
echo '<?php echo "php ", getmypid(), " ", str_repeat("x", 2000), "\n";' >"$WWW/index.php"
cp "$ROOT/gateway/build/hello.cgi" "$WWW/cgi-bin/hello.cgi"
# What the upstream serves under /up/ (the proxy passes the path as it is).
UPWWW=$OUT/upstream-www
mkdir -p "$UPWWW/up"
cp "$WWW/1k.bin" "$WWW/64k.bin" "$UPWWW/up/"
printf '#!/bin/sh\nprintf "Content-Type: text/plain\\n\\npart of a body"\nkill -SEGV $$\n' >"$WWW/cgi-bin/crash.sh"
printf '#!/bin/sh\nprintf "Content-Type: text/plain\\n\\n"\nexec sleep 30\n' >"$WWW/cgi-bin/hang.sh"
chmod +x "$WWW"/cgi-bin/*

# One mix per server: nginx runs no CGI.
write_mix() { # FILE WITH_CGI
    {
        echo "30 /1k.bin"
        echo "10 /64k.bin"
        echo "3 /1m.bin"
        echo "1 /4m.bin"
        echo "2 /victim.bin"
        printf '5 /64k.bin\n    Range: bytes=0-1023\n'
        printf '5 /page.html\n    %s\n' "$IMS"
        printf '10 /page.html\n    Accept-Encoding: gzip\n'
        echo "10 /index.php"
        echo "4 /up/1k.bin"
        echo "1 /up/64k.bin"
        if [[ $2 == 1 ]]; then echo "10 /cgi-bin/hello.cgi"; fi
    } >"$1"
}
write_mix "$OUT/tern.mix" 1
write_mix "$OUT/nginx.mix" 0
printf '4 /1k.bin\n2 /64k.bin\n2 /page.html\n    Accept-Encoding: gzip\n1 /index.php\n' >"$OUT/https.mix"
# HTTP/2 (h2 by ALPN on the HTTPS port): files, a range, a conditional, a
# compressed page.
printf '4 /1k.bin\n2 /64k.bin\n1 /1m.bin\n1 /64k.bin\n    Range: bytes=0-1023\n1 /page.html\n    %s\n2 /page.html\n    Accept-Encoding: gzip\n' \
    "$IMS" >"$OUT/h2.mix"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>/dev/null

# ------------------------------------------------------------------ network namespace
ip netns add "$NS"
ip link add "$VETH_H" type veth peer name "$VETH_N"
ip link set "$VETH_N" netns "$NS"
ip addr add "$NET.1/30" dev "$VETH_H"
ip link set "$VETH_H" up
ip -n "$NS" addr add "$NET.2/30" dev "$VETH_N"
ip -n "$NS" link set "$VETH_N" up
ip -n "$NS" link set lo up
# Delay, loss and reordering both ways (netem); a kernel without netem
# (CONFIG_NET_SCH_NETEM unset) gets what it has: a rate limit (tbf: queueing
# delay) and random loss (nftables numgen), no reordering.
NETEM=(delay 20ms 5ms loss 1% reorder 10% 50%)
if tc qdisc add dev "$VETH_H" root netem "${NETEM[@]}" 2>/dev/null; then
    ip netns exec "$NS" tc qdisc add dev "$VETH_N" root netem "${NETEM[@]}"
    NETWORK="netem ${NETEM[*]}"
else
    TBF=(rate 50mbit burst 64kbit latency 100ms)
    tc qdisc add dev "$VETH_H" root tbf "${TBF[@]}"
    ip netns exec "$NS" tc qdisc add dev "$VETH_N" root tbf "${TBF[@]}"
    ip netns exec "$NS" nft -f - <<'NFT'
table inet soak {
    chain in { type filter hook input priority 0; numgen random mod 100 < 1 drop; }
    chain out { type filter hook output priority 0; numgen random mod 100 < 1 drop; }
}
NFT
    NETWORK="no netem in this kernel: tbf ${TBF[*]}, 1 % loss each way (nftables), no reordering"
fi
bench_log "network namespace $NS ($NET.2 -> $NET.1): $NETWORK"

# ------------------------------------------------------------------ php-fpm
FPM_BIN=$(ls /usr/sbin/php-fpm* | sort | tail -n 1)
FPM_SOCK=$OUT/fpm.sock
cat >"$OUT/fpm.conf" <<EOF
[global]
error_log = $OUT/fpm.log
pid = $OUT/fpm.pid
daemonize = no
[soak]
listen = $FPM_SOCK
pm = static
pm.max_children = 8
EOF
FPM_PID=""
start_fpm() {
    "$FPM_BIN" -y "$OUT/fpm.conf" -F -R >>"$OUT/fpm.out" 2>&1 &
    FPM_PID=$!
    BENCH_PIDS+=("$FPM_PID")
    for _ in $(seq 1 50); do [[ -S $FPM_SOCK ]] && return 0; sleep 0.1; done
    bench_die "php-fpm did not start (see $OUT/fpm.out)"
}
kill_fpm() {
    local pid
    for pid in $(proc_tree "$FPM_PID"); do kill -KILL "$pid" 2>/dev/null || true; done
    wait "$FPM_PID" 2>/dev/null || true
    forget_pid "$FPM_PID"
    rm -f "$FPM_SOCK"
}

# ------------------------------------------------------------------ the proxy's upstream
# A second tern serving $UPWWW, killed and restarted by a fault as php-fpm is.
UP_PORT=$(free_port)
UP_PID=""
start_upstream() {
    [[ -f $OUT/upstream.toml ]] || printf '[server]\nlisten = ["127.0.0.1:%s"]\nroot = "%s"\nworkers = 1\n' \
        "$UP_PORT" "$UPWWW" >"$OUT/upstream.toml"
    "$TERN_BIN" serve --config "$OUT/upstream.toml" >>"$OUT/upstream.out" 2>&1 &
    UP_PID=$!
    BENCH_PIDS+=("$UP_PID")
    wait_http "http://127.0.0.1:$UP_PORT/up/1k.bin" "$UP_PID" 20 || bench_die "the upstream did not start (see $OUT/upstream.out)"
}
kill_upstream() {
    kill -KILL "$UP_PID" 2>/dev/null || true
    wait "$UP_PID" 2>/dev/null || true
    forget_pid "$UP_PID"
}

# ------------------------------------------------------------------ servers
mkdir -p "$LOGFS"
PORT=""
TLS_PORT=""
SERVER_PID=""
write_tern_config() { # FILE NAME
    cat >"$1" <<EOF
[server]
listen = ["127.0.0.1:$PORT", "$NET.1:$PORT"]
root = "$WWW"
workers = $WORKERS
server_header = "tern-$2"
[log]
access = "$LOGFS/access.log"
error = "$OUT/tern-error.log"
level = "warn"
[cgi]
directories = ["/cgi-bin"]
timeout = "3s"
allow_root = true
[fastcgi.backends.php]
address = "unix:$FPM_SOCK"
extensions = [".php"]
[http2]
protocols = ["h2"]
[tls]
listen = ["127.0.0.1:$TLS_PORT"]
[[tls.certificates]]
cert = "$OUT/cert.pem"
key = "$OUT/key.pem"
[upstream.app]
servers = [{ address = "127.0.0.1:$UP_PORT", max_connections = 8 }]
[[site]]
name = "soak"
default = true
[[site.location]]
prefix = "/up/"
proxy = "app"
EOF
}
start_tern() {
    write_tern_config "$OUT/tern-a.toml" a
    write_tern_config "$OUT/tern-b.toml" b
    cp "$OUT/tern-a.toml" "$OUT/tern.toml"
    prlimit --nofile="$NOFILE:$NOFILE" -- "$TERN_BIN" serve --config "$OUT/tern.toml" >>"$OUT/tern.out" 2>&1 &
    SERVER_PID=$!
    BENCH_PIDS+=("$SERVER_PID")
    wait_calibrated "http://127.0.0.1:$PORT" "$OUT/tern-status.json" || bench_die "tern did not start (see $OUT/tern.out)"
}
write_nginx_config() { # FILE NAME
    local dir=$OUT/nginx
    cat >"$1" <<EOF
daemon off;
master_process on;
user root;
worker_processes $WORKERS;
worker_rlimit_nofile $((NOFILE / WORKERS));
pid $dir/nginx.pid;
error_log $OUT/nginx-error.log warn;
events { worker_connections 4096; use epoll; }
http {
    include /etc/nginx/mime.types;
    access_log $LOGFS/access.log;
    sendfile on;
    keepalive_requests 10000;
    gzip on;
    gzip_types text/html;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    upstream app { server 127.0.0.1:$UP_PORT max_conns=8; keepalive 8; }
    server {
        listen 127.0.0.1:$PORT reuseport;
        listen $NET.1:$PORT reuseport;
        listen 127.0.0.1:$TLS_PORT ssl http2 reuseport;
        ssl_certificate $OUT/cert.pem;
        ssl_certificate_key $OUT/key.pem;
        root $WWW;
        add_header X-Soak-Config $2 always;
        location /up/ {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
        location ~ \.php\$ {
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
            fastcgi_pass unix:$FPM_SOCK;
        }
    }
}
EOF
}
start_nginx() {
    mkdir -p "$OUT/nginx"
    write_nginx_config "$OUT/nginx-a.conf" a
    write_nginx_config "$OUT/nginx-b.conf" b
    cp "$OUT/nginx-a.conf" "$OUT/nginx.conf"
    nginx -c "$OUT/nginx.conf" >>"$OUT/nginx.out" 2>&1 &
    SERVER_PID=$!
    BENCH_PIDS+=("$SERVER_PID")
    wait_http "http://127.0.0.1:$PORT/1k.bin" "$SERVER_PID" 20 || bench_die "nginx did not start (see $OUT/nginx.out)"
}

# ------------------------------------------------------------------ the run of one server
S=""
T0=0
fault() {
    local detail=${3:-}
    detail=${detail//$'\n'/ }
    printf '%s,%s,%s,%s\n' "$(date +%s.%N)" "$1" "$2" "$detail" >>"$OUT/$S-faults.csv"
    bench_log "$S: $1 $2 $detail"
}
sleep_until() { local d; d=$(awk -v t0="$T0" -v at="$1" -v now="$(date +%s.%N)" 'BEGIN { d = t0 + at - now; print (d > 0 ? d : 0) }'); sleep "$d" & wait $!; }

# client_loop NAME RATE CONNS URL MIX [ns]: open-loop load in segments of
# SEG seconds until the duration is over.
client_loop() { # NAME RATE CONNECTIONS URL MIX [ns | h2]
    local name=$1 rate=$2 conns=$3 url=$4 mix=$5 i=0 left base
    local -a pre=() post=()
    [[ ${6:-} == ns ]] && pre=(ip netns exec "$NS")
    [[ ${6:-} == h2 ]] && post=(--h2 --streams 8)
    while :; do
        left=$(awk -v t0="$T0" -v d="$DUR" -v now="$(date +%s.%N)" 'BEGIN { printf "%d", t0 + d - now }')
        ((left >= 2)) || break
        ((left > SEG)) && left=$SEG
        base=$OUT/$S-load-$name-$i
        date +%s.%N >"$base.start"
        # Its own user agent: its lines in the access log are counted against its responses.
        "${pre[@]}" "$TERN_BIN" bench "$url" --mix "$mix" -R "$rate" -c "$conns" -t 1 -d "${left}s" -k "${post[@]}" \
            -H "User-Agent: tern-bench/$S-$name-$i" \
            --timeline "$base.csv" --json --no-store >"$base.json" 2>"$base.err" || true
        i=$((i + 1))
    done
}

# The header that names the configuration in force.
config_header() {
    curl -s -o /dev/null -D - -m 3 "http://127.0.0.1:$PORT/1k.bin" | tr -d '\r' | awk -v s="$S" '
        s == "tern" && tolower($1) == "server:" { print $2 }
        s == "nginx" && tolower($1) == "x-soak-config:" { print s "-" $2 }'
}

fault_reload() { # N
    local name=a
    (($1 % 2)) && name=b
    if [[ $S == tern ]]; then cp "$OUT/tern-$name.toml" "$OUT/tern.toml"; else cp "$OUT/nginx-$name.conf" "$OUT/nginx.conf"; fi
    fault event reload "config $name"
    kill -HUP "$SERVER_PID"
    local got=""
    for _ in $(seq 1 30); do
        got=$(config_header)
        [[ $got == "$S-$name" ]] && break
        sleep 0.2
    done
    if [[ $got == "$S-$name" ]]; then fault event "result:reload applied" "ok $got"; else
        fault event "result:reload applied" "FAIL: $got"
        { date; ss -ltn "( sport = :$PORT )"; ss -tn state established "( sport = :$PORT )" | wc -l
          for t in /proc/"$SERVER_PID"/task/*; do echo "${t##*/} $(cut -d' ' -f3 "$t/stat") $(cat "$t/comm") $(cat "$t/wchan")"; done
        } >>"$OUT/$S-reload-diag.txt" 2>&1
    fi
}

fault_fpm() {
    fault start php-fpm-killed
    kill_fpm
    sleep 3
    start_fpm
    sleep 0.5
    fault end php-fpm-killed
}

fault_upstream() {
    fault start upstream-killed
    kill_upstream
    sleep 3
    start_upstream
    fault end upstream-killed
}

fault_cgi_crash() {
    local rc complete=0 n=5
    fault start cgi-crash
    for _ in $(seq 1 $n); do
        rc=0
        curl -s -o /dev/null -m 10 "http://127.0.0.1:$PORT/cgi-bin/crash.sh" || rc=$?
        ((rc == 0)) && complete=$((complete + 1))
    done
    fault end cgi-crash
    if ((complete == 0)); then fault event "result:cgi crash mid-body" "ok: $n of $n cut short"
    else fault event "result:cgi crash mid-body" "FAIL: $complete of $n looked complete"; fi
}

fault_cgi_hang() {
    local code t
    fault start cgi-hang
    t=$(date +%s.%N)
    code=$(curl -s -o /dev/null -m 20 -w '%{http_code}' "http://127.0.0.1:$PORT/cgi-bin/hang.sh" || true)
    t=$(awk -v t="$t" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - t }')
    fault end cgi-hang
    # cgi.timeout = 3s: the head was sent, so the connection is closed (000) or 504.
    if [[ $code == 504 || $code == 200 ]] && awk -v t="$t" 'BEGIN { exit !(t < 6) }'; then
        fault event "result:cgi hang past timeout" "ok: $code after ${t}s"
    else
        fault event "result:cgi hang past timeout" "FAIL: $code after ${t}s"
    fi
}

fault_truncate() {
    fault start file-truncated
    truncate -s 100000 "$WWW/victim.bin"
    sleep 1
    head -c 1048576 /dev/urandom >"$WWW/victim.new"
    mv "$WWW/victim.new" "$WWW/victim.bin"
    sleep 0.5
    fault end file-truncated
}

fault_log_full() { # SECONDS
    fault start log-disk-full
    dd if=/dev/zero of="$LOGFS/filler" bs=64k 2>/dev/null || true
    sleep "$1"
    rm -f "$LOGFS/filler"
    fault end log-disk-full
}

fault_fd_limit() { # SECONDS
    fault start descriptor-limit "$((NOFILE + 200)) connections held"
    local line code
    line=$(python3 "$SOAK_PY" hold --port "$PORT" --conns $((NOFILE + 200)) --seconds "$1")
    fault end descriptor-limit
    fault event "result:descriptor limit held" "ok: $line"
    # Recovery: a fresh connection is answered again.
    for _ in $(seq 1 20); do
        code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$PORT/1k.bin" || true)
        [[ $code == 200 ]] && break
        sleep 0.5
    done
    if [[ $code == 200 ]]; then fault event "result:recovered after the descriptor limit" "ok"
    else fault event "result:recovered after the descriptor limit" "FAIL: $code"; fi
}

# The schedule: offsets (s) within a cycle of CYCLE seconds; reloads every 30 s from 15 s.
# No fault overlaps a reload: out of descriptors, a reload cannot take the listening
# sockets over, and the running configuration stays (logged; seen at 45 s in --short).
if ((SHORT)); then
    SCHEDULE=("5 fpm" "10 upstream" "18 cgi_crash" "19 cgi_hang" "22 truncate" "24 log_full 6" "32 fd_limit 4")
else
    SCHEDULE=("60 fpm" "80 upstream" "90 cgi_crash" "95 cgi_hang" "120 truncate" "150 log_full 20" "200 fd_limit 6")
fi

run_schedule() {
    local -a due=() faults=()
    local cyc at entry n=0 t
    for ((cyc = 0; cyc < DUR; cyc += CYCLE)); do
        for entry in "${SCHEDULE[@]}"; do
            at=$((cyc + ${entry%% *}))
            ((at < DUR - 5)) && due+=("$at ${entry#* }")
        done
    done
    for ((t = 15; t < DUR - 5; t += 30)); do due+=("$t reload $((n++))"); done
    mapfile -t due < <(printf '%s\n' "${due[@]}" | sort -n)
    for entry in "${due[@]}"; do
        read -r at what arg <<<"$entry"
        [[ $S == nginx && $what == cgi_* ]] && continue
        sleep_until "$at"
        case $what in
            # In this shell: the php-fpm it starts again is stopped at the end.
            reload | fpm | upstream) "fault_$what" ${arg:+"$arg"} ;;
            *) "fault_$what" ${arg:+"$arg"} & faults+=($!) ;;
        esac
    done
    for entry in "${faults[@]}"; do wait "$entry" 2>/dev/null || true; done
}

soak_one() { # SERVER
    S=$1
    PORT=$(free_port)
    TLS_PORT=$(free_port)
    : >"$OUT/$S-faults.csv"
    local size
    size=$((64 * 1024 * 1024))
    mount -t tmpfs -o size=$size tmpfs "$LOGFS"
    start_fpm
    start_upstream
    "start_$S"
    # Calibration: the mix in closed loop, stored apart to lend the lab its host description.
    "$TERN_BIN" bench "http://127.0.0.1:$PORT/" --mix "$OUT/$S.mix" -c 32 -t 1 -d "${CAL}s" --json \
        --store "$OUT/calibration.sqlite" --label "soak calibration $S" >"$OUT/$S-calibration.json" 2>"$OUT/$S-calibration.err" \
        || bench_die "calibration failed: $(tail -n 3 "$OUT/$S-calibration.err")"
    local cap rate https_rate h2_rate ns_rate
    cap=$(python3 -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["requests_per_s"]))' "$OUT/$S-calibration.json")
    rate=$(awk -v c="$cap" -v s="$LOAD_SHARE" 'BEGIN { printf "%d", c * s * 0.8 }')
    https_rate=$(awk -v c="$cap" -v s="$LOAD_SHARE" 'BEGIN { printf "%d", c * s * 0.1 + 1 }')
    h2_rate=$(awk -v c="$cap" -v s="$LOAD_SHARE" 'BEGIN { printf "%d", c * s * 0.05 + 1 }')
    ns_rate=$(awk -v c="$cap" -v s="$LOAD_SHARE" 'BEGIN { r = c * s * 0.05; printf "%d", (r > 100 ? 100 : r) + 1 }')
    echo "$S capacity $cap req/s (closed loop, 32 connections, ${CAL}s); load $rate + https $https_rate + h2 $h2_rate + netns $ns_rate req/s" |
        tee "$OUT/$S-load.txt" >&2
    # Room for the whole run's log (about 150 bytes a line) and then some:
    # the disk is full only while the fault fills it.
    mount -o remount,size=$(((rate + https_rate + h2_rate + ns_rate) * DUR * 300 + size)) "$LOGFS"
    local cache_url=""
    [[ $S == tern ]] && cache_url=http://127.0.0.1:$PORT/metrics
    local -a worker_opt=()
    [[ $S == nginx ]] && worker_opt=(--workers-are-children)
    rm -f "$OUT/$S.stop"
    python3 "$SOAK_PY" sample --pid "$SERVER_PID" --out "$OUT/$S-samples.csv" --stop "$OUT/$S.stop" \
        --log "$LOGFS/access.log" ${cache_url:+--metrics "$cache_url"} "${worker_opt[@]}" &
    local sampler=$!
    BENCH_PIDS+=("$sampler")
    sleep 3 # the baseline, before any load
    T0=$(date +%s.%N)
    echo "load_start $T0" >"$OUT/$S-phases"
    LOADERS=()
    client_loop main "$rate" 64 "http://127.0.0.1:$PORT/" "$OUT/$S.mix" & LOADERS+=($!)
    client_loop https "$https_rate" 8 "https://127.0.0.1:$TLS_PORT/" "$OUT/https.mix" & LOADERS+=($!)
    client_loop h2 "$h2_rate" 4 "https://127.0.0.1:$TLS_PORT/" "$OUT/h2.mix" h2 & LOADERS+=($!)
    client_loop netns "$ns_rate" 16 "http://$NET.1:$PORT/" "$OUT/$S.mix" ns & LOADERS+=($!)
    python3 "$ROOT/bench/lib/slowread.py" --port "$PORT" --source 127.0.0.2 --conns 8 --path /1m.bin --rate 4000 \
        --seconds "$DUR" >"$OUT/$S-slowread.txt" 2>&1 & LOADERS+=($!)
    python3 "$SOAK_PY" corpus --port "$PORT" --seconds "$DUR" --dir "$CORPUS" --every 0.5 >"$OUT/$S-corpus.txt" 2>&1 & LOADERS+=($!)
    BENCH_PIDS+=("${LOADERS[@]}")
    run_schedule
    local pid
    for pid in "${LOADERS[@]}"; do wait "$pid" 2>/dev/null || true; forget_pid "$pid"; done
    echo "load_end $(date +%s.%N)" >>"$OUT/$S-phases"
    sleep 8 # after the load: back to the baseline?
    touch "$OUT/$S.stop"
    wait "$sampler" 2>/dev/null || true
    forget_pid "$sampler"
    fault event "slow readers" "$(cat "$OUT/$S-slowread.txt")"
    fault event "hostile corpus" "$(cat "$OUT/$S-corpus.txt")"
    stop_tree "$SERVER_PID"; forget_pid "$SERVER_PID"
    kill_fpm
    kill_upstream
    cp "$LOGFS/access.log" "$OUT/$S-access.log" 2>/dev/null || true
    umount "$LOGFS"
}

RESULT=0
STARTED=$(date -u +%Y-%m-%dT%H:%MZ)
echo "# bench/soak.sh $(date -u +%Y-%m-%dT%H:%MZ), $((DUR))s per server, $(nproc) CPUs, workers $WORKERS," \
    "NOFILE $NOFILE; load before: $(cut -d' ' -f1-3 /proc/loadavg); network namespace: $NETWORK" | tee "$OUT/summary.txt"
STORE_ID=""
for server in ${SERVERS//,/ }; do
    soak_one "$server"
    "$TERN_BIN" lab export 1 --store "$OUT/calibration.sqlite" -o "$OUT/lab-template.json" >/dev/null 2>&1 || true
    rc=0
    extra=()
    [[ $server == tern ]] && extra=(--counts-lost)
    python3 "$SOAK_PY" report --dir "$OUT" --server "$server" --access-log "$OUT/$server-access.log" "${extra[@]}" \
        --lab-template "$OUT/lab-template.json" --label "soak $STARTED ${DUR}s" \
        --command "bench/soak.sh $([[ $SHORT == 1 ]] && echo --short || echo "--duration ${DUR}s")" \
        --window "$WINDOW" --cycle "$CYCLE" >"$OUT/$server-table.tsv" || rc=$?
    [[ $server == tern ]] && RESULT=$rc
    if [[ -s $OUT/$server-lab.json ]]; then
        "$TERN_BIN" lab import "$OUT/$server-lab.json" >"$OUT/$server-lab-import.txt" 2>&1 || true
    fi
done

# The table: one row per check, tern beside nginx.
python3 - "$OUT" <<'EOF' | tee -a "$OUT/summary.txt"
import csv, sys
out = sys.argv[1]
cols = {}
for server in ("tern", "nginx"):
    try:
        with open(f"{out}/{server}-table.tsv") as f:
            for row in csv.reader(f, delimiter="\t"):
                cols.setdefault(row[1], {})[server] = f"{row[2]}: {row[3]}"
    except OSError:
        pass
w = max(len(k) for k in cols) if cols else 10
print(f"{'check':<{w}}  {'tern':<60}  nginx (peer)")
for k, v in cols.items():
    print(f"{k:<{w}}  {v.get('tern', '-'):<60}  {v.get('nginx', '-')}")
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); per-second CSV: $OUT/tern-soak.csv; outputs in $OUT" | tee -a "$OUT/summary.txt"
((RESULT == 0)) || bench_banner "soak: a check of tern FAILED (see the table above)"
exit "$RESULT"
