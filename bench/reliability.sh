#!/usr/bin/env bash
# bench/reliability.sh: the reliability figures of issue 13, tern beside nginx
# on 127.0.0.1, each section a function (run one with --only SECTION):
#
#   slow       honest-client req/s (wrk -t1 -c16, 4 KiB file) alone and under
#              slowhttptest slowloris (-H), slow body (-B) and slow read (-X),
#              SLOW_CONNS attack connections each; tern and nginx. Beside
#              each attack: the bytes the server's sockets hold in the kernel
#              for their clients (sum of ss's send queues, skmem wmem_queued)
#              and the largest one, sampled as the honest run ends, and the
#              CPU the attack tool used meanwhile; SLOW_REPS rounds, medians.
#   cap        a slow-read attack of CAP_ATTACK connections from 127.0.0.2
#              (bench/lib/slowread.py) against max_connections = CAP (nginx:
#              worker_connections), honest wrk from 127.0.0.1: its 503s and
#              req/s, without and with a per-address limit (tern
#              limits.max_connections_per_ip, nginx limit_conn) of CAP_PER_IP.
#   flood      FLOOD idle keep-alive connections (bench/lib/idleconns.c)
#              against max_connections = CAP, then honest wrk: its 503s.
#   reload     wrk -t1 -c32 -d15s on the 4 KiB file while SIGHUP is sent 12
#              times, once a second: wrk's socket errors and non-2xx answers.
#   traversal  path traversal and hidden-file vectors (curl --path-as-is):
#              status per vector, and whether the secret outside the root
#              leaked.
#
# Usage: bench/reliability.sh [--only SECTION] [--servers tern,nginx]
#   env: DUR=10 (wrk seconds) SLOW_CONNS=1500 SLOW_REPS=3 CAP=1000 CAP_ATTACK=1500
#        CAP_PER_IP=500 FLOOD=1500 WORKERS=2 SKIP_BUILD=0
# Installs wrk, nginx, slowhttptest, python3 and gcc if missing (through
# scripts/ensure-packages.sh). Every run is bounded in time and every process
# it starts is stopped by its PID. Output: tables on stdout, raw outputs in
# bench/out/reliability-YYYYmmdd-HHMMSS/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

DUR=${DUR:-10}
SLOW_CONNS=${SLOW_CONNS:-1500}
SLOW_REPS=${SLOW_REPS:-3}
CAP=${CAP:-1000}
CAP_ATTACK=${CAP_ATTACK:-1500}
CAP_PER_IP=${CAP_PER_IP:-500}
FLOOD=${FLOOD:-1500}
WORKERS=${WORKERS:-2}
SERVERS=${SERVERS:-tern,nginx}
ONLY=""
SECTIONS=(slow cap flood reload traversal)

while (($#)); do
    case $1 in
        --only) ONLY=$2; shift 2 ;;
        --servers) SERVERS=$2; shift 2 ;;
        -h | --help) sed -n '2,31p' "$0"; exit 0 ;;
        *) bench_die "unknown option $1 (see --help)" ;;
    esac
done

"$ROOT/scripts/ensure-packages.sh" wrk nginx slowhttptest python3 gcc curl
bench_raise_fd_limit $((SLOW_CONNS * 2 + FLOOD + 1000)) "the attack connections"
bench_start_run reliability
trap stop_all EXIT
bench_build_tern

# The document root: a 4 KiB file for honest clients, 1 MiB for slow
# readers, a hidden file and a secret just outside the root.
WWW=$OUT/www
mkdir -p "$WWW/sub" "$WWW/.git"
head -c 4096 /dev/urandom >"$WWW/4k.bin"
head -c $((1 << 20)) /dev/urandom >"$WWW/1m.bin"
echo "index" >"$WWW/index.html"
echo "[core]" >"$WWW/.git/config"
echo "user:hash" >"$WWW/.htpasswd"
echo "SECRET-OUTSIDE-ROOT" >"$OUT/secret.txt"
ln -sf ../secret.txt "$WWW/link-out"

PORT=""
SERVER_PID=""

# start_tern EXTRA_TOML: tern on a free port with WORKERS workers.
start_tern() {
    PORT=$(free_port)
    printf '[server]\nlisten = ["127.0.0.1:%s"]\nroot = "%s"\nworkers = %s\n%s\n[log]\naccess = "off"\nerror = "%s"\n' \
        "$PORT" "$WWW" "$WORKERS" "$1" "$OUT/tern-error.log" >"$OUT/tern.toml"
    "$TERN_BIN" serve --config "$OUT/tern.toml" >>"$OUT/tern.out" 2>&1 &
    SERVER_PID=$!
    BENCH_PIDS+=("$SERVER_PID")
    wait_http "http://127.0.0.1:$PORT/4k.bin" "$SERVER_PID" 20 || bench_die "tern did not start (see $OUT/tern.out)"
}

# start_nginx MAXCONN EXTRA_HTTP: nginx (master + WORKERS workers).
start_nginx() {
    PORT=$(free_port)
    local dir=$OUT/nginx
    mkdir -p "$dir"
    cat >"$dir/nginx.conf" <<CONF
daemon off;
master_process on;
user root;
worker_processes $WORKERS;
worker_rlimit_nofile $MAXFDS;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections $1; use epoll; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    keepalive_timeout 15s;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    limit_conn_zone \$binary_remote_addr zone=perip:10m;
    limit_conn_status 503;
    $2
    server {
        listen 127.0.0.1:$PORT reuseport;
        root $WWW;
    }
}
CONF
    nginx -c "$dir/nginx.conf" >>"$OUT/nginx.out" 2>&1 &
    SERVER_PID=$!
    BENCH_PIDS+=("$SERVER_PID")
    wait_http "http://127.0.0.1:$PORT/4k.bin" "$SERVER_PID" 20 || bench_die "nginx did not start (see $OUT/nginx.out)"
}

# start SERVER MAXCONN: tern or nginx with a connection cap of MAXCONN and
# the extra settings in $TERN_EXTRA / $NGINX_EXTRA.
start() {
    case $1 in
        tern) start_tern "max_connections = $2
${TERN_EXTRA:-}" ;;
        # worker_connections is per worker: the same cap in all.
        nginx) start_nginx $(($2 / WORKERS)) "${NGINX_EXTRA:-}" ;;
    esac
}

stop_server() {
    stop_tree "$SERVER_PID"
    forget_pid "$SERVER_PID"
}

# honest NAME: wrk -t1 -c16 for DUR s on the 4 KiB file; prints
# "REQ_PER_S NON2XX SOCKET_ERRORS", keeps wrk's output as NAME.wrk.
honest() {
    local f=$OUT/$1.wrk
    timeout $((DUR + 20)) wrk -t1 -c16 -d"${DUR}s" "http://127.0.0.1:$PORT/4k.bin" >"$f" 2>&1 || true
    awk '/Requests\/sec/ { r = $2 } /Non-2xx/ { n = $NF }
         /Socket errors/ { gsub(",", ""); e = $4 + $6 + $8 + $10 }
         END { printf "%.0f %d %d\n", r, n, e }' "$f"
}

# send_queues: "TOTAL_MiB LARGEST_KiB" of what the kernel holds to send on
# the server's connections (skmem wmem_queued: queued, in flight or not).
send_queues() {
    ss -tmnH state established "( sport = :$PORT )" 2>/dev/null |
        awk 'match($0, /,w[0-9]+,/) { w = substr($0, RSTART + 2, RLENGTH - 3) + 0; t += w; if (w > m) m = w }
             END { printf "%.1f %.0f\n", t / 1048576, m / 1024 }'
}

# in_background CMD...: runs CMD, registers its PID in BG.
in_background() {
    "$@" &
    BG=$!
    BENCH_PIDS+=("$BG")
}

stop_background() {
    stop_tree "$BG"
    forget_pid "$BG"
}

servers() { tr ',' ' ' <<<"$SERVERS"; }

# attacker_cpu T0 T1 HZ: the attack tool's CPU over the honest run, % of one
# CPU; "ended" when it was gone by the end (it exits once the server has
# closed every one of its connections).
attacker_cpu() {
    if (($2 == 0)); then echo ended; else echo "$((($2 - $1) * 100 / $3 / DUR))%"; fi
}

# own_cpu_ticks PID: the process's utime+stime in clock ticks (0 once gone).
own_cpu_ticks() {
    local stat
    local -a f
    stat=$(cat /proc/"$1"/stat 2>/dev/null) || { echo 0; return; }
    stat=${stat##*) }
    read -r -a f <<<"$stat"
    echo $((f[11] + f[12]))
}

section_slow() {
    echo "## slow clients: honest req/s under $SLOW_CONNS attack connections (wrk -t1 -c16 -d${DUR}s, 4 KiB), $SLOW_REPS rounds"
    echo "(attacker-cpu: CPU the attack tool itself used during the honest run, % of one CPU; on a host"
    echo " where wrk and the server already fill every CPU, that much is taken from them whatever the server does;"
    echo " \"ended\": the tool exited during the run, because the server had closed every attack connection)"
    printf '%-6s %-5s %-10s %10s %8s %8s %12s %12s %13s\n' server round attack req/s vs-base non2xx sendq-MiB max-KiB attacker-cpu
    local s attack base line rps round t0 t1 hz
    hz=$(getconf CLK_TCK)
    local -A flags=([slowloris]="-H" [slowbody]="-B -s 8192" [slowread]="-X -w 512 -y 1024 -n 5 -z 32 -k 3")
    local -A paths=([slowloris]=/4k.bin [slowbody]=/4k.bin [slowread]=/1m.bin)
    local -A ratios=()
    for s in $(servers); do
        start "$s" $((SLOW_CONNS * 3))
        for round in $(seq 1 "$SLOW_REPS"); do
            read -r base _ _ < <(honest "$s-slow-baseline-$round")
            printf '%-6s %-5s %-10s %10s %8s %8s %12s %12s %13s\n' "$s" "$round" none "$base" 100% - - - -
            for attack in slowloris slowbody slowread; do
                # shellcheck disable=SC2086
                in_background slowhttptest ${flags[$attack]} -c "$SLOW_CONNS" -r 500 -i 10 -l $((DUR + 15)) \
                    -p 3 -u "http://127.0.0.1:$PORT${paths[$attack]}" >"$OUT/$s-$attack-$round.slowhttptest" 2>&1
                sleep 5
                t0=$(own_cpu_ticks "$BG")
                line=$(honest "$s-slow-$attack-$round")
                t1=$(own_cpu_ticks "$BG")
                read -r queued largest < <(send_queues)
                stop_background
                read -r rps non2xx _ <<<"$line"
                ratios[$s-$attack]+="$((base > 0 ? rps * 100 / base : 0)) "
                printf '%-6s %-5s %-10s %10s %7s%% %8s %12s %12s %13s\n' "$s" "$round" "$attack" "$rps" \
                    $((base > 0 ? rps * 100 / base : 0)) "$non2xx" "$queued" "$largest" "$(attacker_cpu "$t0" "$t1" "$hz")"
            done
        done
        stop_server
    done
    echo "median vs-base over the rounds:"
    for s in $(servers); do
        for attack in slowloris slowbody slowread; do
            printf '%-6s %-10s %s%%  (rounds: %s)\n' "$s" "$attack" \
                "$(tr ' ' '\n' <<<"${ratios[$s-$attack]}" | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')" \
                "${ratios[$s-$attack]% }"
        done
    done
}

section_cap() {
    echo "## cap: $CAP_ATTACK slow readers from 127.0.0.2 against a cap of $CAP, honest wrk from 127.0.0.1"
    printf '%-6s %-14s %10s %8s %8s %s\n' server per-ip-limit req/s vs-base non2xx attacker
    local s limit base line rps non2xx
    for s in $(servers); do
        for limit in off "$CAP_PER_IP"; do
            TERN_EXTRA="" NGINX_EXTRA=""
            if [[ $limit != off ]]; then
                TERN_EXTRA="[limits]
max_connections_per_ip = $limit"
                NGINX_EXTRA="limit_conn perip $limit;"
            fi
            start "$s" "$CAP"
            read -r base _ _ < <(honest "$s-cap-$limit-baseline")
            in_background python3 "$ROOT/bench/lib/slowread.py" --port "$PORT" --source 127.0.0.2 \
                --conns "$CAP_ATTACK" --path /1m.bin --rate 10 --seconds $((DUR + 10)) >"$OUT/$s-cap-$limit.attack"
            sleep 5
            line=$(honest "$s-cap-$limit")
            wait "$BG" 2>/dev/null || true
            forget_pid "$BG"
            read -r rps non2xx _ <<<"$line"
            printf '%-6s %-14s %10s %7s%% %8s %s\n' "$s" "$limit" "$rps" $((base > 0 ? rps * 100 / base : 0)) \
                "$non2xx" "$(cat "$OUT/$s-cap-$limit.attack")"
            stop_server
        done
    done
    TERN_EXTRA="" NGINX_EXTRA=""
}

section_flood() {
    echo "## flood: $FLOOD idle keep-alive connections against a cap of $CAP, then honest wrk"
    gcc -O2 -o "$OUT/idleconns" "$ROOT/bench/lib/idleconns.c"
    printf '%-6s %10s %8s %s\n' server req/s non2xx idle-connections
    local s line rps non2xx
    for s in $(servers); do
        start "$s" "$CAP"
        in_background "$OUT/idleconns" -a 127.0.0.1 -p "$PORT" -n "$FLOOD" -u /4k.bin -H $((DUR + 15)) \
            >"$OUT/$s-flood.idle" 2>&1
        for _ in $(seq 1 100); do grep -q ready "$OUT/$s-flood.idle" && break; sleep 0.2; done
        line=$(honest "$s-flood")
        stop_background
        read -r rps non2xx _ <<<"$line"
        printf '%-6s %10s %8s %s\n' "$s" "$rps" "$non2xx" "$(tr '\n' ' ' <"$OUT/$s-flood.idle")"
        stop_server
    done
}

section_reload() {
    echo "## reload: wrk -t1 -c32 -d15s (4 KiB) with SIGHUP sent 12 times, once a second"
    printf '%-6s %10s %8s %s\n' server requests non2xx socket-errors
    local s f pid
    for s in $(servers); do
        start "$s" 10000
        f=$OUT/$s-reload.wrk
        in_background timeout 40 wrk -t1 -c32 -d15s "http://127.0.0.1:$PORT/4k.bin" >"$f" 2>&1
        sleep 1.5
        # nginx: SIGHUP goes to the master, which starts new workers.
        pid=$SERVER_PID
        for _ in $(seq 1 12); do
            kill -HUP "$pid"
            sleep 1
        done
        wait "$BG" 2>/dev/null || true
        forget_pid "$BG"
        printf '%-6s %10s %8s %s\n' "$s" "$(awk '/requests in/ { print $1 }' "$f")" \
            "$(awk '/Non-2xx/ { print $NF }' "$f" | grep . || echo 0)" \
            "$(grep 'Socket errors' "$f" | sed 's/^ *Socket errors: //' || true)"
        [[ -n $(grep 'Socket errors' "$f" || true) ]] || echo "       (no socket errors)"
        stop_server
    done
}

section_traversal() {
    echo "## traversal: status per vector (secret outside the root must never be sent)"
    local vectors=(/../secret.txt /%2e%2e/secret.txt /%2e%2e%2fsecret.txt /..%2fsecret.txt /..%252fsecret.txt
        /%c0%ae%c0%ae/secret.txt /./../secret.txt //../secret.txt /sub/../../secret.txt '/..%5csecret.txt'
        /%00/../secret.txt /link-out /.git/config /.htpasswd /sub/%2e%2e/%2e%2e/secret.txt)
    local s v code leaked body
    for s in $(servers); do
        start "$s" 10000
        leaked=0
        for v in "${vectors[@]}"; do
            body=$OUT/$s-traversal.body
            code=$(curl -s --path-as-is -o "$body" -w '%{http_code}' -m 5 "http://127.0.0.1:$PORT$v" || echo 000)
            grep -q SECRET-OUTSIDE-ROOT "$body" 2>/dev/null && leaked=$((leaked + 1))
            printf '%-6s %-32s %s\n' "$s" "$v" "$code"
        done
        echo "$s: secret leaked by $leaked of ${#vectors[@]} vectors"
        stop_server
    done
}

bench_log "machine: $(uptime)"
echo "# bench/reliability.sh $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, workers $WORKERS; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for section in "${SECTIONS[@]}"; do
    if [[ -z $ONLY || $ONLY == "$section" ]]; then
        "section_$section" | tee -a "$OUT/summary.txt"
    fi
done
[[ -z $ONLY || " ${SECTIONS[*]} " == *" $ONLY "* ]] || bench_die "no section $ONLY (${SECTIONS[*]})"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); outputs in $OUT"
