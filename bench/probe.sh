#!/usr/bin/env bash
# bench/probe.sh: E5 — `tern probe` beside reference tools on this host, a
# ratio per figure (goal: within 10%), plus the eager-vs-lazy RPC crossover.
#
# Everything runs pinned to one CPU (taskset -c $CPU for the references,
# --cpu $CPU for tern), so both sides share a CPU with their peers the same
# way. Like is set against like: tern's figure is the corrected median of
# its SAMPLES intervals, and the own C loops run the same rounds — SAMPLES
# rounds of the iteration count tern calibrated for that figure (read from
# its JSON) — and their median is compared (best beside best is shown too).
# The outside tools report what they report, named in the table: perf bench
# a mean over one long run, iperf3 a mean over 3 s, hyperfine a median.
# References (installed when missing):
#   getppid            perf bench syscall basic; own C loop (crates/tern/tests/probe_refs/getppid.c)
#   pipe round trip    taskset perf bench sched pipe -T (threads, like tern's peer thread);
#                      own C loop (bench/probe/pipe.c), tern's rounds
#   fork+exit+wait     own C loop (bench/probe/fork.c)
#   TCP round trip     own C ping-pong (crates/tern/tests/probe_refs/tcp_pingpong.c), 1 and 32 KiB,
#                      echo in a thread as tern's peer is (and in a process, recorded beside)
#   TCP bandwidth      iperf3 on loopback, client and server on the same CPU
#   warm 1 MiB reads   sysbench fileio seqrd, 1 MiB blocks of one 1 MiB file in the page cache
#                      (tern's working set: the same cached 1 MiB file read again and again)
#   fork, sized        the same C loop from a parent grown to tern's size (its note)
#   command time       hyperfine -N: median(sh -c /bin/true) - median(sh -c ''), tern's
#                      definition; hyperfine's own shell correction is recorded beside
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
    gcc -O2 -pthread -o "$OUT/$c" "$ROOT/crates/tern/tests/probe_refs/$c.c"
done
for c in fork pipe; do
    gcc -O2 -pthread -o "$OUT/$c" "$ROOT/bench/probe/$c.c"
done

bench_log "tern probe all (samples $SAMPLES, CPU $CPU)"
"$TERN_BIN" probe all --cpu "$CPU" --samples "$SAMPLES" --path "$OUT" --json >"$OUT/tern.json"
"$TERN_BIN" probe all --cpu "$CPU" --samples 3 --quick --path "$OUT" >/dev/null   # warm, not recorded

bench_log "references"
refs=$OUT/refs.txt
: >"$refs"
ref() { echo "$1 $2" >>"$refs"; bench_log "  $1 = $2"; }
# The iteration count tern calibrated for a figure: the C loop's rounds are as long.
iters() {
    python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
print(next(f["iterations"] for s in r["suites"] if s["suite"] == sys.argv[2] for f in s["figures"] if f["name"] == sys.argv[3]))' \
        "$OUT/tern.json" "$1" "$2"
}
# "BEST MEDIAN" from a C loop: both recorded.
cref() {
    local best median
    read -r best median < <(pin "${@:2}")
    ref "${1}_best" "$best"
    ref "${1}_median" "$median"
}
ref perf_getppid_us "$(pin perf bench syscall basic 2>&1 | awk '/usecs\/op/ {print $1}')"
cref c_getppid_ns "$OUT/getppid" "$(iters syscalls getppid)" "$SAMPLES"
ref perf_pipe_us "$(pin perf bench sched pipe -T -l 200000 2>&1 | awk '/usecs\/op/ {print $1}')"
cref c_pipe_ns "$OUT/pipe" "$(iters ipc 'pipe round trip, 1 byte')" "$SAMPLES"
cref c_fork_ns "$OUT/fork" "$(iters processes fork+exit+wait)" "$SAMPLES"
# The same loop from a parent grown to tern's size (fork copies the parent's
# mappings and anonymous page tables): the numbers of tern's note.
read -r anon maps threads < <(python3 -c 'import json,re,sys
r = json.load(open(sys.argv[1]))
note = next(n for s in r["suites"] if s["suite"] == "processes" for n in s["notes"] if n.startswith("forked from"))
print(*re.match(r"forked from this process: (\d+) KiB anonymous memory resident, (\d+) mappings, (\d+) threads", note).groups())' "$OUT/tern.json")
cref c_fork_sized_ns "$OUT/fork" "$(iters processes fork+exit+wait)" "$SAMPLES" "$anon" "$maps" "$threads"
ref tern_footprint "${anon}KiB/${maps}maps/${threads}threads"
# tern's loopback peer is a thread: like for like, the C echo is a thread
# too; with an echo process (address-space switches) it is recorded beside.
for peer in thread process; do
    cref "c_tcp_1k_${peer}_ns" "$OUT/tcp_pingpong" 1024 "$(iters net 'TCP round trip, 1 KiB')" "$SAMPLES" "$peer"
    cref "c_tcp_32k_${peer}_ns" "$OUT/tcp_pingpong" 32768 "$(iters net 'TCP round trip, 32 KiB')" "$SAMPLES" "$peer"
done
port=$(free_port)
pin iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
BENCH_PIDS+=($!)
sleep 0.5
ref iperf3_mbps "$(pin iperf3 -c 127.0.0.1 -p "$port" -t 3 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6)')"
sb() { (cd "$OUT" && pin sysbench fileio --file-num=1 --file-total-size=1M --file-block-size=1M "$@"); }
sb prepare >/dev/null
cat "$OUT/test_file.0" >/dev/null
ref sysbench_read_mibs "$(sb --file-test-mode=seqrd --time=3 run | awk '/read, MiB\/s/ {print $3}')"
sb cleanup >/dev/null
# tern's definition timed by hyperfine: the median of `sh -c /bin/true` less
# the median of `sh -c ''`, each run as is (-N). hyperfine's own correction
# subtracts the mean of 50 shell starts taken before the benchmark, which it
# warns is imprecise below 5 ms; it is recorded beside, not compared.
pin hyperfine -N --style none --warmup 5 --runs 50 --export-json "$OUT/hyperfine.json" "sh -c /bin/true" "sh -c ''" >/dev/null
ref hyperfine_sh_true_less_sh_ms "$(python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))["results"]
print((r[0]["median"] - r[1]["median"]) * 1e3)' "$OUT/hyperfine.json")"
pin hyperfine --style none --warmup 5 --runs 50 --export-json "$OUT/hyperfine-shell.json" /bin/true >/dev/null 2>&1
ref hyperfine_own_correction_true_ms "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["median"]*1e3)' "$OUT/hyperfine-shell.json")"

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
def ns(suite, name, stat="median"):
    return fig(suite, name)["corrected_ns"][stat]
def mbs(suite, name):
    f = fig(suite, name)
    return f["bytes_per_op"] / f["corrected_ns"]["median"] * 1e3
n = report["samples"]
same = f"median of the same {n} rounds"
# (figure, tern median, reference, tern best, reference best, reference and its statistic)
rows = [
    ("getppid (ns)", ns("syscalls", "getppid"), float(refs["perf_getppid_us"]) * 1e3, None, None, "perf bench syscall basic (mean)"),
    ("getppid (ns)", ns("syscalls", "getppid"), float(refs["c_getppid_ns_median"]), ns("syscalls", "getppid", "min"), float(refs["c_getppid_ns_best"]), f"own C loop, {same}"),
    ("pipe round trip (µs)", ns("ipc", "pipe round trip, 1 byte") / 1e3, float(refs["perf_pipe_us"]), None, None, "perf bench sched pipe -T (mean)"),
    ("pipe round trip (µs)", ns("ipc", "pipe round trip, 1 byte") / 1e3, float(refs["c_pipe_ns_median"]) / 1e3, ns("ipc", "pipe round trip, 1 byte", "min") / 1e3, float(refs["c_pipe_ns_best"]) / 1e3, f"own C loop, echo thread, {same}"),
    ("fork+exit+wait (µs)", ns("processes", "fork+exit+wait") / 1e3, float(refs["c_fork_ns_median"]) / 1e3, ns("processes", "fork+exit+wait", "min") / 1e3, float(refs["c_fork_ns_best"]) / 1e3, f"own C loop, {same}, its own small parent"),
    ("fork+exit+wait (µs)", ns("processes", "fork+exit+wait") / 1e3, float(refs["c_fork_sized_ns_median"]) / 1e3, ns("processes", "fork+exit+wait", "min") / 1e3, float(refs["c_fork_sized_ns_best"]) / 1e3, f"own C loop, {same}, parent grown to tern's size ({refs['tern_footprint']})"),
    *[(f"TCP round trip {label} (µs)", ns("net", f"TCP round trip, {label}") / 1e3, float(refs[f"c_tcp_{key}_{peer}_ns_median"]) / 1e3,
       ns("net", f"TCP round trip, {label}", "min") / 1e3, float(refs[f"c_tcp_{key}_{peer}_ns_best"]) / 1e3,
       f"own C ping-pong, {same}, echo in a {peer}" + ("" if peer == "thread" else " (unlike: tern's peer is a thread)"))
      for label, key in (("1 KiB", "1k"), ("32 KiB", "32k")) for peer in ("thread", "process")],
    ("TCP bandwidth (MB/s)", mbs("net", "TCP bandwidth, 128 KiB reads"), float(refs["iperf3_mbps"]), None, None, "iperf3 -t 3, loopback (mean)"),
    ("warm read 1 MiB (MB/s)", mbs("disk", "read 1 MiB, warm"), float(refs["sysbench_read_mibs"]) * 1.048576, None, None, "sysbench fileio seqrd, one cached 1 MiB file in 1 MiB blocks (mean)"),
    ("/bin/true, shell subtracted (ms)", ns("commands", "/bin/true") / 1e6, float(refs["hyperfine_sh_true_less_sh_ms"]), None, None, "hyperfine -N, 50 runs each: median(sh -c /bin/true) − median(sh -c '')"),
]
print("| figure | tern (median) | reference | ratio | within 10% | best: tern / reference | reference tool (statistic) |")
print("|---|---|---|---|---|---|---|")
for name, ours, theirs, our_best, their_best, tool in rows:
    r = ours / theirs if theirs else float("nan")
    best = f"{our_best:.4g} / {their_best:.4g}" if our_best is not None else "—"
    print(f"| {name} | {ours:.4g} | {theirs:.4g} | {r:.2f} | {'yes' if abs(r - 1) <= 0.10 else 'NO'} | {best} | {tool} |")
print()
print(f"hyperfine's own shell correction (mean of 50 shell starts, before the runs) gives /bin/true {float(refs['hyperfine_own_correction_true_ms']):.4g} ms: not compared, hyperfine warns it is imprecise below 5 ms.")
print()
print("Eager vs lazy RPC (in-process agent on loopback):")
print()
for s in report["suites"]:
    if s["suite"] == "rpc":
        for n in s["notes"]:
            print(f"- {n}")
PY
bench_log "results in $OUT"
