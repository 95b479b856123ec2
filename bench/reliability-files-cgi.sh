#!/usr/bin/env bash
# bench/reliability-files-cgi.sh: reliability figures of issue 13 §6 and §7 -
# files that change under a response, and what CGI programs leave behind.
#
# 1. Shrink: a 200 MB file is downloaded by a client reading 10 MB/s
#    (curl --limit-rate); after 2 s the file is truncated to 50 MB (beyond what was sent). Reported
#    per I/O method: seconds from the truncation to the end of the download,
#    bytes received, and curl's verdict (18 = "partial file": the client saw
#    the truncation).
# 2. CGI leftovers: N requests (4 at a time) to a program that starts a
#    background `sleep` with every descriptor closed (a "daemon") and exits,
#    plus N/10 to one whose grandchild calls setsid first. Reported, with
#    cgi.kill_group = true and = false: such sleeps still running 3 s after
#    the last request (the setsid ones escape the group by design).
# 3. CGI crashes mid-body: N/10 requests to a program that prints its head
#    and part of its body, then kills itself with SIGSEGV; reported: responses
#    that nevertheless ended with the chunked terminator (curl exit 0).
#
# Usage: bench/reliability-files-cgi.sh   (env: N=2000 SKIP_BUILD=1 WORKERS=2)
# Output: tables on stdout; logs in bench/out/reliability-files-cgi-<time>/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

N=${N:-2000}
WORKERS=${WORKERS:-2}

bench_start_run reliability-files-cgi
bench_build_tern
((TERN_OK)) || exit 1

SITE=$OUT/site
mkdir -p "$SITE/cgi-bin"
# A marker no other process on the machine has in its command line.
MARK=$((31000 + RANDOM % 999)).$$
cat >"$SITE/cgi-bin/daemon.sh" <<EOF
#!/bin/sh
sleep $MARK </dev/null >/dev/null 2>&1 &
printf 'Content-Type: text/plain\n\nstarted'
EOF
cat >"$SITE/cgi-bin/escape.sh" <<EOF
#!/bin/sh
setsid sleep $MARK </dev/null >/dev/null 2>&1 &
printf 'Content-Type: text/plain\n\nstarted'
EOF
cat >"$SITE/cgi-bin/segv.sh" <<'EOF'
#!/bin/sh
printf 'Content-Type: text/plain\n\npart of a body'
kill -SEGV $$
EOF
chmod +x "$SITE"/cgi-bin/*.sh
echo ready >"$SITE/ready.txt"

start_tern() { # NAME EXTRA_TOML IO
    local port
    port=$(free_port)
    printf '[log]\naccess = "off"\n[cgi]\nallow_root = true\n%s\n' "$2" >"$OUT/$1.toml"
    "$TERN_BIN" serve "$SITE" --listen 127.0.0.1:"$port" --workers "$WORKERS" --io "$3" \
        --config "$OUT/$1.toml" 2>"$OUT/$1.log" &
    TERN_PID=$!
    BENCH_PIDS+=("$TERN_PID")
    TERN_URL=http://127.0.0.1:$port
    wait_http "$TERN_URL/ready.txt" "$TERN_PID" 20 || bench_die "tern ($1) did not start: $(cat "$OUT/$1.log")"
}
stop_tern() { stop_tree "$TERN_PID"; forget_pid "$TERN_PID"; }
leftovers() { { pgrep -f "^sleep $MARK\$" || true; } | wc -l; }
kill_leftovers() { local p; for p in $(pgrep -f "^sleep $MARK\$" || true); do kill -KILL "$p" 2>/dev/null || true; done; }
trap 'stop_all; kill_leftovers' EXIT

echo "== 1. a 200 MB file truncated to 50 MB during a 10 MB/s download"
printf '%-9s %12s %14s %6s\n' io seconds bytes curl
for io in sendfile mmap read; do
    head -c 200000000 /dev/zero >"$SITE/big.bin"
    start_tern "shrink-$io" "" "$io"
    curl -s --limit-rate 10M -o "$OUT/big.out" -w '%{size_download}\n' "$TERN_URL/big.bin" \
        >"$OUT/shrink-$io.curl" 2>&1 &
    cpid=$!
    sleep 2
    truncate -s 50000000 "$SITE/big.bin"
    t0=$(date +%s.%N)
    rc=0
    wait "$cpid" || rc=$?
    t1=$(date +%s.%N)
    printf '%-9s %12.2f %14s %6s\n' "$io" "$(echo "$t1 - $t0" | bc)" "$(cat "$OUT/shrink-$io.curl")" "$rc"
    stop_tern
done
rm -f "$SITE/big.bin" "$OUT/big.out"

echo "== 2. CGI grandchildren still running 3 s after $N + $((N / 10)) requests"
printf '%-18s %8s %8s\n' cgi.kill_group daemons setsid
for kg in true false; do
    kill_leftovers
    start_tern "cgi-$kg" "kill_group = $kg" sendfile
    seq "$N" | xargs -P4 -I{} curl -s -o /dev/null "$TERN_URL/cgi-bin/daemon.sh"
    sleep 3
    daemons=$(leftovers)
    kill_leftovers
    seq $((N / 10)) | xargs -P4 -I{} curl -s -o /dev/null "$TERN_URL/cgi-bin/escape.sh"
    sleep 3
    escaped=$(leftovers)
    kill_leftovers
    printf '%-18s %8s %8s\n' "$kg" "$daemons" "$escaped"
    stop_tern
done

echo "== 3. CGI programs killed by SIGSEGV mid-body: responses that looked complete"
start_tern cgi-segv "" sendfile
complete=$(seq $((N / 10)) | xargs -P4 -I{} sh -c "curl -s -o /dev/null '$TERN_URL/cgi-bin/segv.sh' && echo complete" | grep -c complete || true)
printf '%s of %s\n' "$complete" "$((N / 10))"
stop_tern
echo "logs: $OUT"
