#!/usr/bin/env bash
# bench/cache-full.sh: the compressed cache when it is full (issue 13 §5) -
# compression.when_full = "evict" (admission by use, the default) against
# "refuse" (whatever came first stays), on a skewed workload.
#
# 1,000 HTML pages of about 100 KB (gzip about 3.7:1, 27 KB), a cache of
# CACHE (8 MiB: room for about 300 of the 1,000 gzip variants). For each policy a
# fresh tern (compression inline, so the rate includes the compressions a
# policy causes) first gets every page once, in order (the cold sweep that
# fills the cache with pages 1-300 or so), then `tern bench --mix` sends a
# Zipf(1.0) mix over the same pages for DUR seconds, page of rank r with
# weight 10000/r, ranks shuffled (seeded) so that the hot pages are not the
# ones the sweep cached first. Reported: requests/s, the compressed-cache hit
# rate over the measured run (hits / (hits + misses) from /_tern/status, the
# run's difference), the server's CPU time per request (utime+stime over the
# run), variants displaced and refused, memory held vs the cap.
# The server is pinned to CPU 0 and the load generator to CPU 1.
#
# Usage: bench/cache-full.sh        (env: DUR=20 CONNS=16 WORKERS=1 CACHE=8MiB
#                                         SKIP_BUILD=1 to use the built binary)
# Output: a table on stdout; raw JSON in bench/out/cache-full-<time>/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

DUR=${DUR:-20}
CONNS=${CONNS:-16}
WORKERS=${WORKERS:-1}
CACHE=${CACHE:-8MiB}
PAGES=1000

bench_start_run cache-full
bench_build_tern
((TERN_OK)) || exit 1
trap stop_all EXIT

SITE=$OUT/site
mkdir -p "$SITE"
python3 - "$SITE" "$PAGES" <<'EOF'
import random, sys
site, n = sys.argv[1], int(sys.argv[2])
words = ("server cache tern request file page byte gzip load burst queue time "
         "header socket worker reply stream window buffer kernel thread event").split()
rng = random.Random(13)
for i in range(1, n + 1):
    parts = [f"<!DOCTYPE html><html><head><title>page {i}</title></head><body>\n"]
    size = 0
    while size < 100_000:
        p = "<p>" + " ".join(rng.choice(words) + str(rng.randrange(100)) for _ in range(12)) + "</p>\n"
        parts.append(p)
        size += len(p)
    parts.append("</body></html>\n")
    open(f"{site}/p{i}.html", "w").write("".join(parts))
ranks = list(range(1, n + 1))
random.Random(7).shuffle(ranks)
with open(f"{site}/../zipf.mix", "w") as mix:
    for rank, page in enumerate(ranks, 1):
        mix.write(f"{max(1, round(10000 / rank))} /p{page}.html\n")
EOF

printf '%-8s %10s %12s %9s %10s %9s %12s\n' policy req/s cpu/req hit-rate displaced refused memory/cap
for policy in evict refuse; do
    port=$(free_port)
    cat >"$OUT/$policy.toml" <<EOF
[log]
access = "off"
[compression]
adaptive = false
cache_memory = "$CACHE"
when_full = "$policy"
EOF
    taskset -c 0 "$TERN_BIN" serve "$SITE" --listen 127.0.0.1:"$port" --workers "$WORKERS" \
        --config "$OUT/$policy.toml" 2>"$OUT/$policy.log" &
    pid=$!
    BENCH_PIDS+=("$pid")
    wait_http "http://127.0.0.1:$port/p1.html" "$pid" 20 || bench_die "tern ($policy) did not start"
    for i in $(seq 1 "$PAGES"); do printf 'url = "http://127.0.0.1:%s/p%s.html"\noutput = "/dev/null"\n' "$port" "$i"; done >"$OUT/sweep.curl"
    curl -s -H 'Accept-Encoding: gzip' -K "$OUT/sweep.curl"
    curl -s "http://127.0.0.1:$port/_tern/status" >"$OUT/$policy-before.json"
    cpu0=$(tree_cpu_ticks "$pid")
    taskset -c 1 "$TERN_BIN" bench -t1 -c"$CONNS" -d"${DUR}s" --json --mix "$OUT/zipf.mix" \
        -H 'Accept-Encoding: gzip' "http://127.0.0.1:$port/" >"$OUT/$policy-bench.json"
    echo $(($(tree_cpu_ticks "$pid") - cpu0)) >"$OUT/$policy-cpu-ticks"
    curl -s "http://127.0.0.1:$port/_tern/status" >"$OUT/$policy-after.json"
    stop_tree "$pid"
    forget_pid "$pid"
    python3 - "$OUT" "$policy" <<'EOF'
import json, os, sys
out, policy = sys.argv[1], sys.argv[2]
b = json.load(open(f"{out}/{policy}-before.json"))["compression"]
a = json.load(open(f"{out}/{policy}-after.json"))["compression"]
run = json.load(open(f"{out}/{policy}-bench.json"))
hits, misses = a["hits"] - b["hits"], a["misses"] - b["misses"]
rate = hits / (hits + misses) if hits + misses else 0.0
rps = run["requests_per_s"]
ticks = int(open(f"{out}/{policy}-cpu-ticks").read())
cpu_us = ticks * 1e6 / os.sysconf("SC_CLK_TCK") / run["requests"]
print(f"{policy:<8} {rps:>10.0f} {cpu_us:>9.1f} us {rate:>8.1%} {a['displaced']:>10} {a['full']:>9} "
      f"{a['memory_bytes'] / 2**20:>5.1f}/{a['memory_cap'] / 2**20:.0f} MiB")
EOF
done
echo "raw results: $OUT"
