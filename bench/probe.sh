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
# Each suite runs on its own, followed at once by its references, ROUNDS
# times over (the table: medians over the rounds, each round's ratio beside).
# The outside tools report what they report, named in the table: perf bench
# a mean over one long run, iperf3 a mean over 3 s, hyperfine a median.
# References (installed when missing):
#   getppid            perf bench syscall basic; own C loop (crates/tern/tests/probe_refs/getppid.c)
#   pipe round trip    taskset perf bench sched pipe -T (threads, like tern's peer thread);
#                      own C loop (bench/probe/pipe.c), tern's rounds; and across CPUs, the
#                      echo thread on OTHER_CPU (lmbench lat_pipe's two ends on two CPUs)
#   fork+exit+wait     own C loop (bench/probe/fork.c)
#   TCP round trip     own C ping-pong (crates/tern/tests/probe_refs/tcp_pingpong.c), 1 and 32 KiB,
#                      echo in a thread as tern's peer is (and in a process, recorded beside);
#                      1 KiB across CPUs, the echo thread on OTHER_CPU
#   TCP connect+close  own C loop (crates/tern/tests/probe_refs/connect.c), lmbench lat_connect's
#                      method: blocking connect + close, the listener accepts and closes; in a
#                      process as lat_connect has it, and in a thread as tern's peer is
#   TCP bandwidth      iperf3 on loopback, client and server on the same CPU
#   warm 1 MiB reads   sysbench fileio seqrd, 1 MiB blocks of one 1 MiB file in the page cache
#                      (tern's working set: the same cached 1 MiB file read again and again)
#   fork, sized        the same C loop from a parent grown to tern's size (its note)
#   command time       hyperfine -N: median(sh -c /bin/true) - median(sh -c ''), tern's
#                      definition; hyperfine's own shell correction is recorded beside
# Usage: bench/probe.sh            env: CPU=0 OTHER_CPU=1 (0 when CPU is not 0: tern's pick, the
#                                  first other CPU it may use) SAMPLES=11 ROUNDS=3 SKIP_BUILD=0
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"
CPU=${CPU:-0}
OTHER_CPU=${OTHER_CPU:-$((CPU == 0 ? 1 : 0))}
SAMPLES=${SAMPLES:-11}
ROUNDS=${ROUNDS:-3}

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
for c in getppid tcp_pingpong connect; do
    gcc -O2 -pthread -o "$OUT/$c" "$ROOT/crates/tern/tests/probe_refs/$c.c"
done
for c in fork pipe; do
    gcc -O2 -pthread -o "$OUT/$c" "$ROOT/bench/probe/$c.c"
done

"$TERN_BIN" probe all --cpu "$CPU" --samples 3 --quick --path "$OUT" >/dev/null   # warm, not recorded
refs=$OUT/refs.txt
: >"$refs"
ref() { echo "$1 $2" >>"$refs"; bench_log "  $1 = $2"; }
# The iteration count tern calibrated for a figure in round $r: the C loop's
# rounds are as long.
iters() {
    python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
print(next(f["iterations"] for s in r["suites"] if s["suite"] == sys.argv[2] for f in s["figures"] if f["name"] == sys.argv[3]))' \
        "$OUT/tern-$1-$r.json" "$1" "$2"
}
# "BEST MEDIAN" from a C loop: both recorded.
cref() {
    local best median
    read -r best median < <(pin "${@:2}")
    ref "${1}_best" "$best"
    ref "${1}_median" "$median"
}
tern_suite() {
    bench_log "tern probe $1 (samples $SAMPLES, CPU $CPU), round $r"
    "$TERN_BIN" probe "$1" --cpu "$CPU" --samples "$SAMPLES" --path "$OUT" --json >"$OUT/tern-$1-$r.json"
}
# Each suite is followed at once by its references, and the whole is done
# ROUNDS times: a figure and its reference are taken within seconds of each
# other, so an outside task waking on the CPU for a while (which on one
# CPU lengthens every round trip: it runs between the two ends) weighs on
# both, and the table gives the median over the rounds with each round's
# ratio beside it.
for r in $(seq 1 "$ROUNDS"); do
    tern_suite syscalls
    ref perf_getppid_us "$(pin perf bench syscall basic 2>&1 | awk '/usecs\/op/ {print $1}')"
    cref c_getppid_ns "$OUT/getppid" "$(iters syscalls getppid)" "$SAMPLES"
    tern_suite processes
    cref c_fork_ns "$OUT/fork" "$(iters processes fork+exit+wait)" "$SAMPLES"
    # The same loop from a parent grown to tern's size (fork copies the
    # parent's mappings and anonymous page tables): the numbers of its note.
    read -r anon maps threads < <(python3 -c 'import json,re,sys
r = json.load(open(sys.argv[1]))
note = next(n for s in r["suites"] if s["suite"] == "processes" for n in s["notes"] if n.startswith("forked from"))
print(*re.match(r"forked from this process: (\d+) KiB anonymous memory resident, (\d+) mappings, (\d+) threads", note).groups())' "$OUT/tern-processes-$r.json")
    cref c_fork_sized_ns "$OUT/fork" "$(iters processes fork+exit+wait)" "$SAMPLES" "$anon" "$maps" "$threads"
    ref tern_footprint "${anon}KiB/${maps}maps/${threads}threads"
    tern_suite ipc
    ref perf_pipe_us "$(pin perf bench sched pipe -T -l 200000 2>&1 | awk '/usecs\/op/ {print $1}')"
    cref c_pipe_ns "$OUT/pipe" "$(iters ipc 'pipe round trip, 1 byte')" "$SAMPLES"
    cref c_pipe_across_ns "$OUT/pipe" "$(iters ipc 'pipe round trip, 1 byte, across CPUs')" "$SAMPLES" "$OTHER_CPU"
    tern_suite net
    # tern's loopback peer is a thread: like for like, the C echo is a
    # thread too; with an echo process (address-space switches) it is
    # recorded beside.
    for peer in thread process; do
        cref "c_tcp_1k_${peer}_ns" "$OUT/tcp_pingpong" 1024 "$(iters net 'TCP round trip, 1 KiB')" "$SAMPLES" "$peer"
        cref "c_tcp_32k_${peer}_ns" "$OUT/tcp_pingpong" 32768 "$(iters net 'TCP round trip, 32 KiB')" "$SAMPLES" "$peer"
        cref "c_connect_${peer}_ns" "$OUT/connect" "$(iters net 'TCP connect+close')" "$SAMPLES" "$peer"
    done
    cref c_tcp_1k_across_ns "$OUT/tcp_pingpong" 1024 "$(iters net 'TCP round trip, 1 KiB, across CPUs')" "$SAMPLES" thread "$OTHER_CPU"
    port=$(free_port)
    pin iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
    BENCH_PIDS+=($!)
    sleep 0.5
    ref iperf3_mbps "$(pin iperf3 -c 127.0.0.1 -p "$port" -t 3 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6)')"
    tern_suite disk
    sb() { (cd "$OUT" && pin sysbench fileio --file-num=1 --file-total-size=1M --file-block-size=1M "$@"); }
    sb prepare >/dev/null
    ref sysbench_read_mibs "$(sb --file-test-mode=seqrd --time=3 run | awk '/read, MiB\/s/ {print $3}')"
    sb cleanup >/dev/null
    tern_suite commands
    # tern's definition timed by hyperfine: the median of `sh -c /bin/true`
    # less the median of `sh -c ''`, each run as is (-N). hyperfine's own
    # correction subtracts the mean of 50 shell starts taken before the
    # benchmark, which it warns is imprecise below 5 ms; recorded beside.
    pin hyperfine -N --style none --warmup 5 --runs 50 --export-json "$OUT/hyperfine.json" "sh -c /bin/true" "sh -c ''" >/dev/null
    ref hyperfine_sh_true_less_sh_ms "$(python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))["results"]
print((r[0]["median"] - r[1]["median"]) * 1e3)' "$OUT/hyperfine.json")"
    pin hyperfine --style none --warmup 5 --runs 50 --export-json "$OUT/hyperfine-shell.json" /bin/true >/dev/null 2>&1
    ref hyperfine_own_correction_true_ms "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["median"]*1e3)' "$OUT/hyperfine-shell.json")"
done
bench_log "tern probe rpc (the eager-vs-lazy crossover)"
r=1
tern_suite rpc

python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/report.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
refs = {}
for line in open(f"{out}/refs.txt"):
    if len(line.split()) == 2:
        key, value = line.split()
        refs.setdefault(key, []).append(value)
def tern(suite, r):
    return json.load(open(f"{out}/tern-{suite}-{r}.json"))
def fig(report, suite, name):
    return next(f for s in report["suites"] if s["suite"] == suite for f in s["figures"] if f["name"] == name)
# Per round: a function of round r giving tern's value and the reference's.
def ns(suite, name, stat="median", scale=1.0):
    return lambda r: fig(tern(suite, r), suite, name)["corrected_ns"][stat] / scale
def mbs(suite, name):
    def per(r):
        f = fig(tern(suite, r), suite, name)
        return f["bytes_per_op"] / f["corrected_ns"]["median"] * 1e3
    return per
def rf(key, scale=1.0):
    return lambda r: float(refs[key][r - 1]) * scale
same = f"median of the same {tern('syscalls', 1)['samples']} rounds"
# (figure, tern, reference, tern best, reference best, reference and its statistic)
rows = [
    ("getppid (ns)", ns("syscalls", "getppid"), rf("perf_getppid_us", 1e3), None, None, "perf bench syscall basic (mean)"),
    ("getppid (ns)", ns("syscalls", "getppid"), rf("c_getppid_ns_median"), ns("syscalls", "getppid", "min"), rf("c_getppid_ns_best"), f"own C loop, {same}"),
    ("pipe round trip (µs)", ns("ipc", "pipe round trip, 1 byte", scale=1e3), rf("perf_pipe_us"), None, None, "perf bench sched pipe -T (mean)"),
    ("pipe round trip (µs)", ns("ipc", "pipe round trip, 1 byte", scale=1e3), rf("c_pipe_ns_median", 1e-3), ns("ipc", "pipe round trip, 1 byte", "min", 1e3), rf("c_pipe_ns_best", 1e-3), f"own C loop, echo thread, {same}"),
    ("pipe round trip across CPUs (µs)", ns("ipc", "pipe round trip, 1 byte, across CPUs", scale=1e3), rf("c_pipe_across_ns_median", 1e-3), ns("ipc", "pipe round trip, 1 byte, across CPUs", "min", 1e3), rf("c_pipe_across_ns_best", 1e-3), f"own C loop, echo thread on the other CPU, {same}"),
    ("fork+exit+wait (µs)", ns("processes", "fork+exit+wait", scale=1e3), rf("c_fork_ns_median", 1e-3), ns("processes", "fork+exit+wait", "min", 1e3), rf("c_fork_ns_best", 1e-3), f"own C loop, {same}, its own small parent"),
    ("fork+exit+wait (µs)", ns("processes", "fork+exit+wait", scale=1e3), rf("c_fork_sized_ns_median", 1e-3), ns("processes", "fork+exit+wait", "min", 1e3), rf("c_fork_sized_ns_best", 1e-3), f"own C loop, {same}, parent grown to tern's size ({refs['tern_footprint'][0]})"),
    *[(f"TCP round trip {label} (µs)", ns("net", f"TCP round trip, {label}", scale=1e3), rf(f"c_tcp_{key}_{peer}_ns_median", 1e-3),
       ns("net", f"TCP round trip, {label}", "min", 1e3), rf(f"c_tcp_{key}_{peer}_ns_best", 1e-3),
       f"own C ping-pong, {same}, echo in a {peer}" + ("" if peer == "thread" else " (unlike: tern's peer is a thread)"))
      for label, key in (("1 KiB", "1k"), ("32 KiB", "32k")) for peer in ("thread", "process")],
    ("TCP round trip 1 KiB across CPUs (µs)", ns("net", "TCP round trip, 1 KiB, across CPUs", scale=1e3), rf("c_tcp_1k_across_ns_median", 1e-3),
     ns("net", "TCP round trip, 1 KiB, across CPUs", "min", 1e3), rf("c_tcp_1k_across_ns_best", 1e-3), f"own C ping-pong, {same}, echo thread on the other CPU"),
    *[("TCP connect+close (µs)", ns("net", "TCP connect+close", scale=1e3), rf(f"c_connect_{peer}_ns_median", 1e-3),
       ns("net", "TCP connect+close", "min", 1e3), rf(f"c_connect_{peer}_ns_best", 1e-3),
       f"own C connect+close loop (lat_connect's method), {same}, listener in a {peer}" + (" (lat_connect's)" if peer == "process" else " (tern's)"))
      for peer in ("thread", "process")],
    ("TCP bandwidth (MB/s)", mbs("net", "TCP bandwidth, 128 KiB reads"), rf("iperf3_mbps"), None, None, "iperf3 -t 3, loopback (mean)"),
    ("warm read 1 MiB (MB/s)", mbs("disk", "read 1 MiB, warm"), rf("sysbench_read_mibs", 1.048576), None, None, "sysbench fileio seqrd, one cached 1 MiB file in 1 MiB blocks (mean)"),
    ("/bin/true, shell subtracted (ms)", ns("commands", "/bin/true", scale=1e6), rf("hyperfine_sh_true_less_sh_ms"), None, None, "hyperfine -N, 50 runs each: median(sh -c /bin/true) − median(sh -c '')"),
]
med = lambda f: statistics.median(f(r) for r in range(1, rounds + 1))
print(f"Medians over {rounds} rounds; in each round the suite ran and its references right after it.")
print()
print("| figure | tern | reference | ratio | within 10% | ratio per round | best: tern / reference | reference tool (statistic) |")
print("|---|---|---|---|---|---|---|---|")
for name, ours, theirs, our_best, their_best, tool in rows:
    o, t = med(ours), med(theirs)
    ratio = o / t if t else float("nan")
    per_round = " ".join(f"{ours(r) / theirs(r):.2f}" for r in range(1, rounds + 1))
    best = f"{med(our_best):.4g} / {med(their_best):.4g}" if our_best is not None else "—"
    print(f"| {name} | {o:.4g} | {t:.4g} | {ratio:.2f} | {'yes' if abs(ratio - 1) <= 0.10 else 'NO'} | {per_round} | {best} | {tool} |")
print()
print(f"hyperfine's own shell correction (mean of 50 shell starts, before the runs) gives /bin/true {med(rf('hyperfine_own_correction_true_ms')):.4g} ms: not compared, hyperfine warns it is imprecise below 5 ms.")
print()
print("Eager vs lazy RPC (in-process agent on loopback):")
print()
for s in tern("rpc", 1)["suites"]:
    for n in s["notes"]:
        print(f"- {n}")
PY
bench_log "results in $OUT"
