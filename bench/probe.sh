#!/usr/bin/env bash
# bench/probe.sh: E5 — `tern probe` beside reference tools on this host, a
# ratio per figure (goal: within 10%), plus the eager-vs-lazy RPC crossover.
#
# Everything runs pinned to one CPU (taskset -c $CPU for the references,
# --cpu $CPU for tern), so both sides share a CPU with their peers the same
# way. References (installed when missing):
#   getppid            perf bench syscall basic; own C loop (crates/tern/tests/probe_refs/getppid.c)
#   pipe round trip    taskset perf bench sched pipe -T (threads, like tern's peer thread)
#   fork+exit+wait     own C loop (bench/probe/fork.c)
#   TCP round trip     own C ping-pong (crates/tern/tests/probe_refs/tcp_pingpong.c), 1 and 32 KiB
#   TCP bandwidth      iperf3 on loopback, client and server on the same CPU
#   warm 1 MiB reads   sysbench fileio seqrd, 1 MiB blocks, 64 MiB file in the page cache
#   command time       hyperfine /bin/true (shell start subtracted, as tern does)
# tern figures are corrected medians; reference figures are what each tool
# reports (best-of-rounds for the C loops, median for hyperfine, means for
# perf bench, sysbench and iperf3).
#
# Usage: bench/probe.sh            env: CPU=0 SAMPLES=11 SKIP_BUILD=0
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"
CPU=${CPU:-0}
SAMPLES=${SAMPLES:-11}

"$ROOT/scripts/ensure-packages.sh" linux-perf hyperfine sysbench iperf3 gcc util-linux >&2
bench_start_run probe
bench_build_tern
((TERN_OK)) || bench_die "no tern binary"
trap stop_all EXIT

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD)"
    echo "uptime: $(uptime)"
    top -bn1 | sed -n '1,5p'
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >&2

pin() { taskset -c "$CPU" "$@"; }
for c in getppid tcp_pingpong; do
    gcc -O2 -o "$OUT/$c" "$ROOT/crates/tern/tests/probe_refs/$c.c"
done
gcc -O2 -o "$OUT/fork" "$ROOT/bench/probe/fork.c"

bench_log "tern probe all (samples $SAMPLES, CPU $CPU)"
"$TERN_BIN" probe all --cpu "$CPU" --samples "$SAMPLES" --path "$OUT" --json >"$OUT/tern.json"
"$TERN_BIN" probe all --cpu "$CPU" --samples 3 --quick --path "$OUT" >/dev/null   # warm, not recorded

bench_log "references"
refs=$OUT/refs.txt
: >"$refs"
ref() { echo "$1 $2" >>"$refs"; bench_log "  $1 = $2"; }
ref perf_getppid_us "$(pin perf bench syscall basic 2>&1 | awk '/usecs\/op/ {print $1}')"
ref c_getppid_ns "$(pin "$OUT/getppid")"
ref perf_pipe_us "$(pin perf bench sched pipe -T -l 200000 2>&1 | awk '/usecs\/op/ {print $1}')"
ref c_fork_ns "$(pin "$OUT/fork")"
ref c_tcp_1k_ns "$(pin "$OUT/tcp_pingpong" 1024)"
ref c_tcp_32k_ns "$(pin "$OUT/tcp_pingpong" 32768)"
port=$(free_port)
pin iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
BENCH_PIDS+=($!)
sleep 0.5
ref iperf3_mbps "$(pin iperf3 -c 127.0.0.1 -p "$port" -t 3 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6)')"
(cd "$OUT" && sysbench fileio --file-num=1 --file-total-size=64M prepare >/dev/null)
(cd "$OUT" && cat test_file.0 >/dev/null)
ref sysbench_read_mibs "$(cd "$OUT" && pin sysbench fileio --file-num=1 --file-total-size=64M --file-block-size=1M \
    --file-test-mode=seqrd --time=3 run | awk '/read, MiB\/s/ {print $3}')"
(cd "$OUT" && sysbench fileio --file-num=1 --file-total-size=64M cleanup >/dev/null)
pin hyperfine --style none --warmup 5 --runs 50 --export-json "$OUT/hyperfine.json" /bin/true >/dev/null
ref hyperfine_true_ms "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["median"]*1e3)' "$OUT/hyperfine.json")"

python3 - "$OUT/tern.json" "$refs" <<'PY' | tee "$OUT/report.md"
import json, sys
report = json.load(open(sys.argv[1]))
refs = dict(l.split() for l in open(sys.argv[2]) if len(l.split()) == 2)
def fig(suite, name):
    for s in report["suites"]:
        if s["suite"] == suite:
            for f in s["figures"]:
                if f["name"] == name:
                    return f
    raise KeyError(name)
def ns(suite, name):
    return fig(suite, name)["corrected_ns"]["median"]
def mbs(suite, name):
    f = fig(suite, name)
    return f["bytes_per_op"] / f["corrected_ns"]["median"] * 1e3
rows = [
    ("getppid (ns)", ns("syscalls", "getppid"), float(refs["perf_getppid_us"]) * 1e3, "perf bench syscall basic"),
    ("getppid (ns)", ns("syscalls", "getppid"), float(refs["c_getppid_ns"]), "own C loop, best of 200 rounds"),
    ("pipe round trip (µs)", ns("ipc", "pipe round trip, 1 byte") / 1e3, float(refs["perf_pipe_us"]), "perf bench sched pipe -T"),
    ("fork+exit+wait (µs)", ns("processes", "fork+exit+wait") / 1e3, float(refs["c_fork_ns"]) / 1e3, "own C loop, best of 50 rounds"),
    ("TCP round trip 1 KiB (µs)", ns("net", "TCP round trip, 1 KiB") / 1e3, float(refs["c_tcp_1k_ns"]) / 1e3, "own C ping-pong, best of 100 rounds"),
    ("TCP round trip 32 KiB (µs)", ns("net", "TCP round trip, 32 KiB") / 1e3, float(refs["c_tcp_32k_ns"]) / 1e3, "own C ping-pong, best of 100 rounds"),
    ("TCP bandwidth (MB/s)", mbs("net", "TCP bandwidth, 128 KiB reads"), float(refs["iperf3_mbps"]), "iperf3 -t 3, loopback"),
    ("warm read 1 MiB (MB/s)", mbs("disk", "read 1 MiB, warm"), float(refs["sysbench_read_mibs"]) * 1.048576, "sysbench fileio seqrd 1 MiB blocks"),
    ("/bin/true, shell subtracted (ms)", ns("commands", "/bin/true") / 1e6, float(refs["hyperfine_true_ms"]), "hyperfine median"),
]
print("| figure | tern | reference | ratio | within 10% | reference tool |")
print("|---|---|---|---|---|---|")
for name, ours, theirs, tool in rows:
    r = ours / theirs if theirs else float("nan")
    print(f"| {name} | {ours:.4g} | {theirs:.4g} | {r:.2f} | {'yes' if abs(r - 1) <= 0.10 else 'NO'} | {tool} |")
print()
print("Eager vs lazy RPC (in-process agent on loopback):")
print()
for s in report["suites"]:
    if s["suite"] == "rpc":
        for n in s["notes"]:
            print(f"- {n}")
PY
bench_log "results in $OUT"
