#!/usr/bin/env bash
# bench/fastcgi.sh: FastCGI benchmarks (issue 8), on 127.0.0.1.
#
# Part "php": a PHP hello page (<?php echo "hello";) and a ~5 KB PHP page,
# through tern, nginx (upstream keepalive + fastcgi_keep_conn on), lighttpd
# (mod_fastcgi) and h2o (fastcgi.connect, kept alive), all to ONE php-fpm pool
# (pm = static, CHILDREN children, Unix socket), one server at a time (a
# kept-alive connection holds a php-fpm child, so servers cannot share the
# pool at once). Per client count (CONNS), server and page, R rounds
# (order rotating) of a 1 s warm-up and a measured `wrk -t1 -cC -dD
# --latency`; reported from the median round: requests/s, its ratio to the
# best other server, p99, CPU per request (server process tree, and server
# + php-fpm), the connections php-fpm had accepted and those left waiting
# in its accept queue mid-run (`ss`), and wrk's socket errors (timeouts:
# requests with no answer within 2 s). tern's pool size is CHILDREN;
# nginx's keepalive is CHILDREN.
#
# Why two client counts: with CONNS = CHILDREN every server can give each
# client its own backend connection, so all serve every client. With more
# clients, tern queues requests for its CHILDREN connections, while nginx
# and h2o open a connection per waiting request: each php-fpm child keeps
# serving the connection it accepted, so the extra connections (and their
# clients) wait in php-fpm's accept queue, unanswered until some
# connection closes. Their rate then comes from fewer clients; the queue
# column shows it.
#
# Part "e2": experiment E2, 1 KiB … 1 MiB files, E2_REQS requests x E2_RUNS
# runs each (tern bench -n, C connections), median requests/s: the gateway's
# FastCGI file server (gateway/build/fcgi-files) in mmap and read modes
# behind tern, and tern's own static read/mmap/sendfile; the mmap/read ratio
# per size for both.
#
# Usage: bench/fastcgi.sh [php|e2|all]     env: DUR=5 REPS=3 CONNS="8 32"
#        WORKERS=2 CHILDREN=8 E2_REQS=1000 E2_RUNS=5 E2_CONNS=4 SKIP_BUILD=0
#        SERVERS="tern nginx lighttpd h2o" (part "php": which servers, in order)
# Output: tables on stdout and in bench/out/fastcgi-*/results.md, with the
# machine's load before each part.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

PART=${1:-all}
DUR=${DUR:-5}
REPS=${REPS:-3}
CONNS=${CONNS:-8 32}
WORKERS=${WORKERS:-2}
CHILDREN=${CHILDREN:-8}
SERVERS=${SERVERS:-tern nginx lighttpd h2o}
E2_REQS=${E2_REQS:-1000}
E2_RUNS=${E2_RUNS:-5}
E2_CONNS=${E2_CONNS:-4}
HZ=$(getconf CLK_TCK)

bench_start_run fastcgi
trap stop_all EXIT
"$ROOT/scripts/ensure-packages.sh" php-fpm nginx lighttpd h2o wrk libfcgi-dev make gcc iproute2 procps
bench_build_tern
((TERN_OK)) || bench_die "no tern binary"
make -s -C "$ROOT/gateway" build/fcgi-files
RESULTS=$OUT/results.md

# launch NAME CMD...: starts CMD in its own session, logs in $OUT.
launch() {
    local name=$1
    shift
    setsid "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null &
    LAUNCHED=$!
    BENCH_PIDS+=("$LAUNCHED")
}

wait_file() {
    local i
    for i in $(seq 100); do [[ -e $1 ]] && return 0; sleep 0.1; done
    bench_die "$1 did not appear"
}

# ------------------------------------------------------------------ php-fpm
DOCROOT=$OUT/www
mkdir -p "$DOCROOT"
echo '<?php echo "hello";' >"$DOCROOT/hello.php"
cat >"$DOCROOT/page.php" <<'EOF'
<?php
$rows = "";
for ($i = 1; $i <= 40; $i++) {
    $rows .= "<tr><td>" . $i . "</td><td>item number " . $i . "</td><td>" . ($i * 37 % 101) . "</td></tr>\n";
}
echo "<!DOCTYPE html>\n<html><head><title>A 5 KB PHP page</title></head><body>\n<h1>Items</h1>\n<table>\n",
     $rows, "</table>\n<p>", str_repeat("Lorem ipsum dolor sit amet. ", 50), "</p>\n</body></html>\n";
EOF
FPM_SOCK=$OUT/fpm.sock
FPM_BIN=$(ls /usr/sbin/php-fpm* | sort | tail -n 1)
cat >"$OUT/fpm.conf" <<EOF
[global]
error_log = $OUT/fpm.log
daemonize = no
pid = $OUT/fpm.pid
[bench]
listen = $FPM_SOCK
listen.backlog = 4096
pm = static
pm.max_children = $CHILDREN
php_admin_value[output_buffering] = 0
EOF
start_fpm() {
    rm -f "$FPM_SOCK"
    launch php-fpm "$FPM_BIN" -y "$OUT/fpm.conf" -F -R
    FPM_PID=$LAUNCHED
    wait_file "$FPM_SOCK"
}

fpm_connections() { ss -x -H state connected src "$FPM_SOCK" | wc -l; }

# ------------------------------------------------------------------ servers
start_server() {
    local name=$1 port=$2 dir=$OUT/$1
    mkdir -p "$dir"
    case $name in
        tern)
            cat >"$dir/tern.toml" <<EOF
[server]
workers = $WORKERS
[log]
access = "off"
[limits]
keepalive_requests = 0
[fastcgi.backends.php]
address = "unix:$FPM_SOCK"
extensions = [".php"]
max_connections = $CHILDREN
EOF
            launch tern "$TERN_BIN" serve "$DOCROOT" --listen "127.0.0.1:$port" --config "$dir/tern.toml" ;;
        nginx)
            mkdir -p "$dir/tmp"
            cat >"$dir/nginx.conf" <<EOF
daemon off;
user root;
worker_processes $WORKERS;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000000;
    client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp;
    uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
    upstream php { server unix:$FPM_SOCK; keepalive $CHILDREN; }
    server {
        listen 127.0.0.1:$port reuseport;
        root $DOCROOT;
        location ~ \.php\$ {
            fastcgi_pass php;
            fastcgi_keep_conn on;
            fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
            fastcgi_param SCRIPT_NAME \$fastcgi_script_name;
            fastcgi_param QUERY_STRING \$query_string;
            fastcgi_param REQUEST_METHOD \$request_method;
            fastcgi_param CONTENT_TYPE \$content_type;
            fastcgi_param CONTENT_LENGTH \$content_length;
            fastcgi_param REQUEST_URI \$request_uri;
            fastcgi_param DOCUMENT_ROOT \$document_root;
            fastcgi_param SERVER_PROTOCOL \$server_protocol;
            fastcgi_param GATEWAY_INTERFACE CGI/1.1;
            fastcgi_param REMOTE_ADDR \$remote_addr;
            fastcgi_param SERVER_NAME \$server_name;
            fastcgi_param SERVER_PORT \$server_port;
            fastcgi_param HTTP_HOST \$host;
        }
    }
}
EOF
            launch nginx nginx -e "$dir/error.log" -c "$dir/nginx.conf" -p "$dir/" ;;
        lighttpd)
            cat >"$dir/lighttpd.conf" <<EOF
server.modules = ( "mod_fastcgi" )
server.document-root = "$DOCROOT"
server.bind = "127.0.0.1"
server.port = $port
server.max-worker = $WORKERS
server.errorlog = "$dir/error.log"
server.max-keep-alive-requests = 65535
fastcgi.server = ( ".php" => (( "socket" => "$FPM_SOCK", "check-local" => "enable" )) )
EOF
            launch lighttpd lighttpd -D -f "$dir/lighttpd.conf" ;;
        h2o)
            cat >"$dir/h2o.conf" <<EOF
num-threads: $WORKERS
user: root
error-log: $dir/error.log
listen:
  host: 127.0.0.1
  port: $port
hosts:
  default:
    paths:
      /:
        file.dir: $DOCROOT
        file.custom-handler:
          extension: .php
          fastcgi.connect:
            port: $FPM_SOCK
            type: unix
          fastcgi.timeout.keepalive: 60000
EOF
            launch h2o h2o -c "$dir/h2o.conf" ;;
    esac
    SERVER_PID=$LAUNCHED
    local i
    for i in $(seq 100); do
        [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/hello.php") == 200 ]] && return 0
        sleep 0.1
    done
    bench_die "$name did not answer on port $port (see $OUT/$name.err)"
}

# fpm_queue: connections waiting in php-fpm's accept queue (taken by no
# child).
fpm_queue() { ss -x -l -H src "$FPM_SOCK" | awk '{ print $3; exit }'; }

# measure NAME URL CONNS: one warm-up and one measured wrk run; prints
# "req_per_s p99 server_us_per_req total_us_per_req fpm_conns non2xx
# fpm_queue socket_errors" (php-fpm's connections sampled mid-run).
measure() {
    local name=$1 url=$2 conns=$3 s0 f0 s1 f1 out sampler
    wrk -t1 -c"$conns" -d1 "$url" >/dev/null 2>&1
    s0=$(tree_cpu_ticks "$SERVER_PID")
    f0=$(tree_cpu_ticks "$FPM_PID")
    (
        sleep "$((DUR / 2))"
        echo "$(fpm_connections) $(fpm_queue)" >"$OUT/mid-run"
    ) &
    sampler=$!
    out=$(wrk -t1 -c"$conns" -d"$DUR" --latency "$url")
    s1=$(tree_cpu_ticks "$SERVER_PID")
    f1=$(tree_cpu_ticks "$FPM_PID")
    wait "$sampler" || true
    echo "$out" >>"$OUT/wrk-$name-c$conns.txt"
    python3 - "$out" "$((s1 - s0))" "$((f1 - f0))" "$HZ" "$(cat "$OUT/mid-run")" <<'EOF'
import re, sys
out, server, fpm, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
conns, queue = sys.argv[5].split()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
total = int(re.search(r"(\d+) requests in", out).group(1))
m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
p99 = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
per = lambda t: t * 1e6 / hz / max(total, 1)
sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
sock = sum(int(g) for g in sock.groups()) if sock else 0
print(f"{rps:.0f} {p99:.2f} {per(server):.1f} {per(server + fpm):.1f} {conns} {errors.group(1) if errors else 0} {queue} {sock}")
EOF
}

php_part() {
    bench_say ""
    bench_say "## FastCGI: PHP through four servers to one php-fpm pool ($(date -u +%Y-%m-%dT%H:%MZ))"
    bench_machine_state
    bench_say "php-fpm: $("$FPM_BIN" -v | head -n1); pm static, $CHILDREN children; wrk -t1 -c{$CONNS} -d$DUR, $REPS rounds; servers with $WORKERS workers"
    start_fpm
    local -a servers conns
    read -r -a servers <<<"$SERVERS"
    read -r -a conns <<<"$CONNS"
    local r i c name page port line table
    declare -A RES=()
    for ((r = 0; r < REPS; r++)); do
        for ((i = 0; i < ${#servers[@]}; i++)); do
            name=${servers[$(((i + r) % ${#servers[@]}))]}
            port=$(free_port)
            start_server "$name" "$port"
            for c in "${conns[@]}"; do
                for page in hello page; do
                    line=$(measure "$name-$page" "http://127.0.0.1:$port/$page.php" "$c")
                    bench_log "$name -c$c $page round $r: $line"
                    RES[$name,$c,$page]+="$line;"
                done
            done
            stop_tree "$SERVER_PID"
            forget_pid "$SERVER_PID"
        done
    done
    for c in "${conns[@]}"; do
        for page in hello page; do
            bench_say ""
            bench_say "| $page.php, $c clients | req/s (median) | ÷ best other | p99 ms | CPU µs/req server | CPU µs/req server+php-fpm | php-fpm conns | php-fpm accept queue | wrk socket errors | non-2xx |"
            bench_say "|---|---|---|---|---|---|---|---|---|---|"
            table=""
            for name in "${servers[@]}"; do table+="$name=${RES[$name,$c,$page]}|"; done
            python3 - "$table" <<'EOF' | tee -a "$RESULTS"
import sys, statistics
servers = {}
for part in sys.argv[1].split("|"):
    if part:
        name, rows = part.split("=", 1)
        servers[name] = sorted((r.split() for r in rows.split(";") if r), key=lambda r: float(r[0]))
med = {n: float(rows[len(rows) // 2][0]) for n, rows in servers.items()}
for name, rows in servers.items():
    m = rows[len(rows) // 2]
    cpu = lambda k: statistics.median(float(r[k]) for r in rows)
    others = [v for n, v in med.items() if n != name]
    ratio = f"{med[name] / max(others):.2f}" if others else "-"
    print(f"| {name} | {m[0]} (runs: {', '.join(r[0] for r in rows)}) | {ratio} | {m[1]} | {cpu(2):.1f} | {cpu(3):.1f} | {m[4]} | {m[6]} | {m[7]} | {m[5]} |")
EOF
        done
    done
    stop_tree "$FPM_PID"
    forget_pid "$FPM_PID"
}

# ------------------------------------------------------------------ E2
e2_part() {
    bench_say ""
    bench_say "## E2: files through the FastCGI file server (mmap, read) and tern's static methods ($(date -u +%Y-%m-%dT%H:%MZ))"
    bench_machine_state
    bench_say "tern bench -n $E2_REQS -c $E2_CONNS, $E2_RUNS runs each, median req/s; fcgi-files --threads 4 behind tern (pool 4); tern --workers $WORKERS"
    local files=$OUT/e2www/fs sizes=(1024 4096 16384 65536 262144 1048576) n cfg port fpid run
    mkdir -p "$files"
    for n in "${sizes[@]}"; do head -c "$n" /dev/urandom >"$files/f$n.bin"; done
    declare -A RPS=()
    for cfg in fcgi-mmap fcgi-read tern-read tern-mmap tern-sendfile; do
        port=$(free_port)
        fpid=""
        case $cfg in
            fcgi-*)
                rm -f "$OUT/files.sock"
                launch "fcgi-files-${cfg#fcgi-}" "$ROOT/gateway/build/fcgi-files" --root "$files" --socket "$OUT/files.sock" \
                    --prefix /fs --threads 4 --mode "${cfg#fcgi-}"
                fpid=$LAUNCHED
                wait_file "$OUT/files.sock"
                printf '[log]\naccess = "off"\n[fastcgi.backends.files]\naddress = "unix:%s"\nprefixes = ["/fs"]\ncheck_file = false\nmax_connections = 4\n' \
                    "$OUT/files.sock" >"$OUT/e2-tern.toml"
                launch "tern-$cfg" "$TERN_BIN" serve "$OUT/www" --listen "127.0.0.1:$port" --workers "$WORKERS" --config "$OUT/e2-tern.toml" ;;
            tern-*)
                printf '[log]\naccess = "off"\n' >"$OUT/e2-tern.toml"
                launch "$cfg" "$TERN_BIN" serve "$OUT/e2www" --listen "127.0.0.1:$port" --workers "$WORKERS" \
                    --io "${cfg#tern-}" --config "$OUT/e2-tern.toml" ;;
        esac
        local tpid=$LAUNCHED
        for n in "${sizes[@]}"; do
            local url=http://127.0.0.1:$port/fs/f$n.bin i
            for i in $(seq 100); do
                [[ $(curl -s -o /dev/null -w '%{http_code}' "$url") == 200 ]] && break
                sleep 0.1
            done
            cmp -s <(curl -s "$url") "$files/f$n.bin" || bench_die "$cfg sent other bytes for f$n.bin"
            "$TERN_BIN" bench -n "$E2_REQS" -c "$E2_CONNS" "$url" >/dev/null 2>&1 # warm-up
            for ((run = 0; run < E2_RUNS; run++)); do
                RPS[$cfg,$n]+="$("$TERN_BIN" bench -n "$E2_REQS" -c "$E2_CONNS" --json "$url" |
                    python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["requests_per_s"]))') "
            done
            bench_log "E2 $cfg f$n: ${RPS[$cfg,$n]}"
        done
        stop_tree "$tpid"
        forget_pid "$tpid"
        if [[ -n $fpid ]]; then
            stop_tree "$fpid"
            forget_pid "$fpid"
        fi
    done
    bench_say ""
    bench_say "| size | fcgi mmap | fcgi read | fcgi mmap/read | tern read | tern mmap | tern sendfile | tern mmap/read |"
    bench_say "|---|---|---|---|---|---|---|---|"
    for n in "${sizes[@]}"; do
        python3 - "$n" "${RPS[fcgi-mmap,$n]}" "${RPS[fcgi-read,$n]}" "${RPS[tern-read,$n]}" "${RPS[tern-mmap,$n]}" \
            "${RPS[tern-sendfile,$n]}" <<'EOF' | tee -a "$RESULTS"
import sys, statistics
n = int(sys.argv[1])
med = [statistics.median(float(x) for x in a.split()) for a in sys.argv[2:]]
size = f"{n // 1048576} MiB" if n >= 1048576 else f"{n // 1024} KiB"
print(f"| {size} | {med[0]:.0f} | {med[1]:.0f} | {med[0] / med[1]:.2f} | {med[2]:.0f} | {med[3]:.0f} | {med[4]:.0f} | {med[3] / med[2]:.2f} |")
EOF
    done
}

case $PART in
    php) php_part ;;
    e2) e2_part ;;
    all) php_part; e2_part ;;
    *) bench_die "usage: bench/fastcgi.sh [php|e2|all]" ;;
esac
bench_log "results: $RESULTS"
