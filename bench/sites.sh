#!/usr/bin/env bash
# bench/sites.sh: what sites and locations cost (issue 31), tern beside
# nginx on 127.0.0.1.
#
# Routing: a 1 KiB static file (`/static/1k.bin`, keep-alive) from
#   tern-flat     tern with the flat configuration: one site, no location;
#   tern-site     tern with one site of 20 locations (6 exact, 10 prefix, 4
#                 regex), whose `/static/` prefix answers after its 4 regexes
#                 were tried (nginx's order: the longest prefix does not skip
#                 them);
#   tern-sites    tern with SITES such sites, asked for the one in the middle
#                 of the table (the same name as tern-site's);
#   nginx-flat, nginx-site, nginx-sites: nginx with the same server blocks
#                 and locations.
# Basic auth: the same file under `/private/`, with the right credentials
# (one SHA-crypt `$6$` hash, 5,000 rounds, the same htpasswd file for both):
#   tern-remember tern remembering credentials it let in (the default);
#   tern-hash     tern with `remember = false`: a hash every request;
#   nginx-auth    nginx `auth_basic`, which hashes every request (crypt(3)).
# Every server is up at once with WORKERS workers, access logs off; each row
# is run REPS times, one run per target per round, the order rotated each
# round so noise from other work on the machine falls on all alike; medians
# are reported with ratios. Before the runs, each target's answer is
# checked (status and bytes; 401 without credentials), and `tern route`'s
# explanation of the routed request is saved. `uptime` is logged before and
# after. By default the servers are pinned to CPU 0 and wrk to CPU 1.
#
# Usage: bench/sites.sh [options]      (each option also has an env variable)
#   -d, --duration S      seconds per run                    DUR=5
#   -r, --reps N          runs per target (median reported)  REPS=5
#   -c, --connections N   wrk connections                    CONNS=32
#   -w, --workers N       server workers                     WORKERS=1
#       --sites N         sites of the big table             SITES=1000
#       --rows LIST       comma list of routing,auth         ROWS=routing,auth
#       --warmup S        warm-up seconds per target         WARMUP=1
#       --no-pin          do not pin                         PIN=0
#       --skip-build      do not run cargo build             SKIP_BUILD=1
#   -h, --help
# Output: a table on stdout; configs, logs, raw wrk outputs and runs.tsv in
# bench/out/sites-YYYYmmdd-HHMMSS/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

DUR=${DUR:-5}
REPS=${REPS:-5}
CONNS=${CONNS:-32}
WORKERS=${WORKERS:-1}
SITES=${SITES:-1000}
ROWS=${ROWS:-routing,auth}
WARMUP=${WARMUP:-1}
PIN=${PIN:-1}
SKIP_BUILD=${SKIP_BUILD:-0}

readonly PACKAGES=(nginx wrk curl openssl python3 procps iproute2 util-linux)
readonly PASSWORD='correct horse battery staple'

COMMAND_LINE="bench/sites.sh${*:+ $*}"
while [[ $# -gt 0 ]]; do
    case $1 in
        --sites) SITES=$2; shift 2 ;;
        --rows) ROWS=$2; shift 2 ;;
        *) bench_option "duration reps connections workers warmup no-pin skip-build" "$@"; shift "$BENCH_SHIFT" ;;
    esac
done
for v in DUR REPS CONNS WORKERS SITES WARMUP; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || bench_die "$v must be a positive integer (got '${!v}')"
done
IFS=, read -r -a ROW_LIST <<<"$ROWS"
for row in "${ROW_LIST[@]}"; do
    [[ $row == routing || $row == auth ]] || bench_die "unknown row '$row' (known: routing, auth)"
done
# The site asked for: the middle of the table.
readonly HOST=site$((SITES / 2)).bench.test

"$ROOT/scripts/ensure-packages.sh" "${PACKAGES[@]}"
bench_start_run sites
bench_raise_fd_limit 4096 "the connections"
trap stop_all EXIT
trap 'bench_log "interrupted by a signal; stopping the servers"; exit 130' INT TERM

SERVER_PIN=() CLIENT_PIN=()
if [[ $PIN == 1 ]] && (($(nproc) >= 2)); then
    SERVER_PIN=(taskset -c 0) CLIENT_PIN=(taskset -c 1)
fi
bench_build_tern
((TERN_OK)) || bench_die "no tern binary"

bench_log "uptime: $(uptime)"
{
    printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf 'command\t%s\n' "$COMMAND_LINE"
    printf 'git_commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    printf 'nproc\t%s\n' "$(nproc)"
    printf 'kernel\t%s\n' "$(uname -r)"
    printf 'nginx\t%s\n' "$(nginx -v 2>&1 | head -n1)"
    printf 'wrk\t%s\n' "$(wrk --version 2>&1 | head -n1 | sed 's/ Copyright.*//')"
    printf 'uptime_start\t%s\n' "$(uptime)"
    printf 'settings\tDUR=%s REPS=%s CONNS=%s WORKERS=%s SITES=%s WARMUP=%s PIN=%s\n' \
        "$DUR" "$REPS" "$CONNS" "$WORKERS" "$SITES" "$WARMUP" "$PIN"
} >"$OUT/meta.tsv"

# ---------------------------------------------------------------- content

DOCROOT=$OUT/docroot
mkdir -p "$DOCROOT/static" "$DOCROOT/private"
head -c 1024 < <(yes 'tern sites benchmark: the same bytes every run. 0123456789abcdefghijklmnopqrstuvwxyz') \
    >"$DOCROOT/static/1k.bin"
cp "$DOCROOT/static/1k.bin" "$DOCROOT/private/1k.bin"
# One SHA-crypt hash (openssl's default 5,000 rounds) for both servers.
printf 'bench:%s\n' "$(openssl passwd -6 -salt tern.bench "$PASSWORD")" >"$OUT/users.htpasswd"
AUTH="Authorization: Basic $(printf 'bench:%s' "$PASSWORD" | base64 -w0)"

# The configurations: the same locations in both servers' words.
python3 - "$OUT" "$DOCROOT" "$SITES" "$WORKERS" "$MAXFDS" <<'EOF'
import sys
out, docroot, sites, workers, maxfds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
exact = ["/favicon.ico", "/robots.txt", "/humans.txt", "/sitemap.xml", "/ads.txt", "/.well-known/security.txt"]
prefixes = ["/static/", "/assets/", "/images/", "/media/", "/docs/", "/blog/", "/shop/", "/account/", "/help/", "/news/"]
regexes = [r"\.php$", r"^/api/v[0-9]+/", r"\.(bak|old|orig)$", r"^/wp-"]
assert len(exact) + len(prefixes) + len(regexes) == 20
common = "[server]\nmax_connections = 20000\n\n[limits]\nkeepalive_requests = 0\n\n[timeouts]\nkeepalive = \"300s\"\n"

def tern_site(n):
    s = f'\n[[site]]\nname = "site{n}"\nhosts = ["site{n}.bench.test", "www.site{n}.bench.test"]\nroot = "{docroot}"\n'
    for p in exact:
        s += f'\n[[site.location]]\nexact = "{p}"\nrespond = {{ status = 404 }}\n'
    for p in prefixes:
        s += f'\n[[site.location]]\nprefix = "{p}"\nexpires = "1h"\n' if p != "/static/" else f'\n[[site.location]]\nprefix = "{p}"\n'
    for r in regexes:
        s += f"\n[[site.location]]\nregex = '{r}'\nrespond = {{ status = 404 }}\n"
    return s

open(f"{out}/tern-flat.toml", "w").write(common)
open(f"{out}/tern-site.toml", "w").write(common + tern_site(sites // 2))
open(f"{out}/tern-sites.toml", "w").write(common + "".join(tern_site(n) for n in range(sites)))
open(f"{out}/tern-auth.toml", "w").write(common + f"""
[[site]]
name = "auth"
default = true
root = "{docroot}"

[[site.location]]
prefix = "/private/"
auth = {{ realm = "bench", htpasswd = "{out}/users.htpasswd" }}

[[site.location]]
prefix = "/hashed/"
alias = "{docroot}/private"
auth = {{ realm = "bench", htpasswd = "{out}/users.htpasswd", remember = false }}
""")

def nginx(name, servers):
    return f"""daemon off;
master_process on;
user root;
worker_processes {workers};
worker_rlimit_nofile {maxfds};
pid {out}/{name}/nginx.pid;
error_log {out}/{name}/error.log warn;
events {{ worker_connections 10000; use epoll; multi_accept off; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    open_file_cache max=1000 inactive=60s;
    server_tokens off;
    server_names_hash_max_size 8192;
    server_names_hash_bucket_size 128;
    types {{ application/octet-stream bin; }}
    default_type application/octet-stream;
    client_body_temp_path {out}/{name}/client_body;
    proxy_temp_path {out}/{name}/proxy;
    fastcgi_temp_path {out}/{name}/fastcgi;
    uwsgi_temp_path {out}/{name}/uwsgi;
    scgi_temp_path {out}/{name}/scgi;
{servers}}}
"""

def nginx_site(n, first):
    # Listen options go on one server block of the address only.
    options = " backlog=4096 reuseport" if first else ""
    s = f"    server {{\n        listen 127.0.0.1:@PORT@{options};\n        server_name site{n}.bench.test www.site{n}.bench.test;\n        root {docroot};\n"
    for p in exact:
        s += f"        location = {p} {{ return 404; }}\n"
    for p in prefixes:
        s += f"        location {p} {{ expires 1h; }}\n" if p != "/static/" else f"        location {p} {{ }}\n"
    for r in regexes:
        s += f"        location ~ {r} {{ return 404; }}\n"
    return s + "    }\n"

flat = f"""    server {{
        listen 127.0.0.1:@PORT@ backlog=4096 reuseport;
        server_name localhost;
        root {docroot};
        location /private/ {{
            auth_basic "bench";
            auth_basic_user_file {out}/users.htpasswd;
        }}
    }}
"""
open(f"{out}/nginx-flat.conf.tmpl", "w").write(nginx("nginx-flat", flat))
open(f"{out}/nginx-site.conf.tmpl", "w").write(nginx("nginx-site", nginx_site(sites // 2, True)))
open(f"{out}/nginx-sites.conf.tmpl", "w").write(nginx("nginx-sites", "".join(nginx_site(n, n == 0) for n in range(sites))))
EOF

# ---------------------------------------------------------------- servers

declare -A PORT_OF=() PID_OF=()

# start NAME: one server instance (tern-flat, tern-site, tern-sites,
# tern-auth, nginx-flat, nginx-site, nginx-sites) on a free port, pinned;
# waits until it answers.
start() {
    local name=$1 dir=$OUT/$1 port
    mkdir -p "$dir"
    port=$(free_port)
    local -a cmd
    case $name in
        tern-*)
            cmd=("$TERN_BIN" serve "$DOCROOT" --listen "127.0.0.1:$port" --workers "$WORKERS" --io mmap
                 --access-log off --config "$OUT/$name.toml") ;;
        nginx-*)
            sed "s|@PORT@|$port|g" "$OUT/$name.conf.tmpl" >"$dir/nginx.conf"
            cmd=(nginx -e "$dir/error.log" -c "$dir/nginx.conf" -p "$dir/") ;;
    esac
    printf '%q ' "${cmd[@]}" >"$dir/command.txt"
    setsid "${SERVER_PIN[@]}" "${cmd[@]}" >"$dir/stdout.log" 2>"$dir/stderr.log" </dev/null &
    PID_OF[$name]=$!
    PORT_OF[$name]=$port
    BENCH_PIDS+=("$!")
    for _ in $(seq 1 150); do
        kill -0 "${PID_OF[$name]}" 2>/dev/null || break
        curl -s -o /dev/null -m 1 "http://127.0.0.1:$port/" && return 0
        sleep 0.1
    done
    bench_die "$name did not start: $(tail -n 5 "$dir/stderr.log" "$dir/error.log" 2>/dev/null | tr '\n' ' ')"
}

# Each target: "SERVER HOST PATH AUTH(0|1)".
declare -A TARGET=(
    [tern-flat]="tern-flat $HOST /static/1k.bin 0"
    [tern-site]="tern-site $HOST /static/1k.bin 0"
    [tern-sites]="tern-sites $HOST /static/1k.bin 0"
    [nginx-flat]="nginx-flat $HOST /static/1k.bin 0"
    [nginx-site]="nginx-site $HOST /static/1k.bin 0"
    [nginx-sites]="nginx-sites $HOST /static/1k.bin 0"
    [tern-remember]="tern-auth $HOST /private/1k.bin 1"
    [tern-hash]="tern-auth $HOST /hashed/1k.bin 1"
    [nginx-auth]="nginx-flat $HOST /private/1k.bin 1"
)
declare -A ROW_TARGETS=(
    [routing]="tern-flat tern-site tern-sites nginx-flat nginx-site nginx-sites"
    [auth]="tern-remember tern-hash nginx-auth"
)

# check TARGET: 200 with the file's bytes (and 401 without credentials
# where they are needed), else the run stops.
check() {
    local server host path auth got port
    read -r server host path auth <<<"${TARGET[$1]}"
    port=${PORT_OF[$server]}
    local -a hdr=(-H "Host: $host")
    ((auth)) && hdr+=(-H "$AUTH")
    curl -sf -m 5 "${hdr[@]}" -o "$OUT/check-$1.bin" "http://127.0.0.1:$port$path" || bench_die "$1: GET $path failed"
    cmp -s "$OUT/check-$1.bin" "$DOCROOT/static/1k.bin" || bench_die "$1: GET $path: wrong bytes"
    if ((auth)); then
        got=$(curl -s -m 5 -H "Host: $host" -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port$path")
        [[ $got == 401 ]] || bench_die "$1: GET $path without credentials answered $got, not 401"
    fi
}

# run TARGET ROW REP DURATION: one wrk run; appends a line to runs.tsv
# (not for the warm-up).
run() {
    local target=$1 row=$2 rep=$3 dur=$4 server host path auth file
    read -r server host path auth <<<"${TARGET[$target]}"
    file=$OUT/wrk-$target-$rep.txt
    local -a hdr=(-H "Host: $host")
    ((auth)) && hdr+=(-H "$AUTH")
    local cpu0 cpu1
    cpu0=$(tree_cpu_ticks "${PID_OF[$server]}")
    timeout -k 5 $((dur + 30)) "${CLIENT_PIN[@]}" wrk -t1 -c"$CONNS" -d"${dur}s" --timeout 5s --latency "${hdr[@]}" \
        "http://127.0.0.1:${PORT_OF[$server]}$path" >"$file" 2>&1 || echo "wrk exited with $?" >>"$file"
    cpu1=$(tree_cpu_ticks "${PID_OF[$server]}")
    kill -0 "${PID_OF[$server]}" 2>/dev/null || bench_die "$server died during $target run $rep"
    [[ $rep == warmup ]] || printf '%s\t%s\t%s\t%s\t%s\n' "$row" "$target" "$rep" "$file" $((cpu1 - cpu0)) >>"$OUT/runs.tsv"
}

want_row() { [[ " ${ROW_LIST[*]} " == *" $1 "* ]]; }

servers=()
want_row routing && servers+=(tern-flat tern-site tern-sites nginx-flat nginx-site nginx-sites)
want_row auth && servers+=(tern-auth)
want_row auth && ! want_row routing && servers+=(nginx-flat)
for s in "${servers[@]}"; do
    bench_log "starting $s"
    start "$s"
done
if want_row routing; then
    "$TERN_BIN" route --config "$OUT/tern-sites.toml" "http://$HOST/static/1k.bin" >"$OUT/tern-route.txt"
    bench_log "tern route http://$HOST/static/1k.bin: $(tail -n 1 "$OUT/tern-route.txt")"
fi

printf 'row\ttarget\trep\twrk_file\tserver_cpu_ticks\n' >"$OUT/runs.tsv"
for row in "${ROW_LIST[@]}"; do
    read -r -a targets <<<"${ROW_TARGETS[$row]}"
    for t in "${targets[@]}"; do check "$t"; done
    bench_log "$row: warm-up ${WARMUP}s each, then $REPS rounds of ${DUR}s runs: ${targets[*]}"
    for t in "${targets[@]}"; do run "$t" "$row" warmup "$WARMUP"; done
    n=${#targets[@]}
    for ((rep = 1; rep <= REPS; rep++)); do
        for ((i = 0; i < n; i++)); do
            t=${targets[(i + rep - 1) % n]}
            run "$t" "$row" "$rep" "$DUR"
            bench_log "$row round $rep: $t $(awk '/^Requests\/sec/ {print $2 " req/s"}' "$OUT/wrk-$t-$rep.txt")"
        done
    done
done
stop_all
printf 'uptime_end\t%s\n' "$(uptime)" >>"$OUT/meta.tsv"
bench_log "uptime: $(uptime)"

PYTHONPATH=$ROOT/bench/lib python3 - "$OUT/runs.tsv" "$SITES" "$(getconf CLK_TCK)" <<'EOF' | tee "$OUT/report.txt"
import csv, statistics, sys
import wrk

runs, sites, clk_tck = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
by = {}
for r in csv.DictReader(open(runs), delimiter="\t"):
    w = wrk.parse(r["wrk_file"])
    # The server's CPU time (its whole process tree, from /proc) per request.
    w["cpu_us"] = int(r["server_cpu_ticks"]) * 1e6 / clk_tck / w["requests"] if w["requests"] else 0
    by.setdefault(r["row"], {}).setdefault(r["target"], []).append(w)
def median(key):
    return {row: {t: statistics.median(w[key] or 0 for w in ws) for t, ws in ts.items()} for row, ts in by.items()}
med, p99, cpu = median("rps"), median("p99_us"), median("cpu_us")
n = len(next(iter(next(iter(by.values())).values())))
print(f"Medians of {n} runs per target, rounds rotated; wrk errors (socket, non-2xx/3xx) summed over the runs;")
print("server CPU: utime+stime of its process tree per request.")
print()
print("| row | target | req/s (median) | runs | server CPU µs/req (median) | p99 ms (median) | errors |")
print("|---|---|---:|---|---:|---:|---:|")
for row, targets in by.items():
    for t, ws in targets.items():
        runs_text = ", ".join(f"{w['rps'] or 0:.0f}" for w in ws)
        errors = sum(wrk.errors(w) for w in ws)
        print(f"| {row} | {t} | {med[row][t]:,.0f} | {runs_text} | {cpu[row][t]:.1f} | {p99[row][t] / 1000:.2f} | {errors} |")
print()
ratios = [
    ("routing", "tern-sites", "tern-site", f"tern, {sites} sites / one site, 20 locations each (target >= 0.98)"),
    ("routing", "tern-sites", "tern-flat", f"tern, {sites} sites x 20 locations / the flat configuration"),
    ("routing", "tern-site", "tern-flat", "tern, one site of 20 locations / the flat configuration"),
    ("routing", "nginx-sites", "nginx-site", f"nginx, {sites} server blocks / one, 20 locations each"),
    ("routing", "nginx-sites", "nginx-flat", f"nginx, {sites} server blocks x 20 locations / one without locations"),
    ("routing", "tern-sites", "nginx-sites", f"tern / nginx, {sites} sites each"),
    ("routing", "tern-flat", "nginx-flat", "tern / nginx, flat"),
    ("auth", "tern-remember", "tern-hash", "tern remembering / hashing every request"),
    ("auth", "tern-remember", "nginx-auth", "tern remembering / nginx auth_basic"),
    ("auth", "tern-hash", "nginx-auth", "tern hashing every request / nginx auth_basic"),
]
print("| ratio of the medians | req/s | server CPU per request |")
print("|---|---:|---:|")
for row, a, b, what in ratios:
    if row in med and med[row].get(b) and cpu[row].get(b):
        print(f"| {what} | {med[row][a] / med[row][b]:.3f} | {cpu[row][a] / cpu[row][b]:.3f} |")
EOF
bench_log "raw data in $OUT"
