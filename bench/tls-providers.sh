#!/usr/bin/env bash
# bench/tls-providers.sh: rustls's crypto providers, ring and aws-lc-rs,
# measured for what tern's server does (issue 15: the provider is chosen by
# measurement): full TLS 1.3 handshakes/s with ECDSA P-256 and RSA-2048
# certificates and bulk encryption MB/s per TLS 1.3 cipher suite, the
# server's side only (bench/tls-providers/src/main.rs says how).
#
# It also checks that aws-lc-rs builds from crates.io alone: the build runs
# with `cmake` and `go` shadowed by stubs that record any call and fail, and
# its time is recorded (the first, cold build compiles aws-lc-sys's C).
#
# Usage: bench/tls-providers.sh [-d SECONDS] [--no-pin]
#   -d, --duration S   seconds per figure           DUR=3
#       --no-pin       do not pin to CPU 1          PIN=0
# Output: the figures on stdout; build log, meta.tsv and results.tsv in
# bench/out/tls-providers-YYYYmmdd-HHMMSS/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib/common.sh
source "$ROOT/bench/lib/common.sh"

DUR=${DUR:-3}
PIN=${PIN:-1}
while [[ $# -gt 0 ]]; do
    case $1 in
        -d|--duration) DUR=$2; shift 2 ;;
        --no-pin) PIN=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) bench_die "unknown option: $1" ;;
    esac
done
[[ $DUR =~ ^[0-9]+(\.[0-9]+)?$ ]] || bench_die "DUR must be a number of seconds (got '$DUR')"

"$ROOT/scripts/ensure-packages.sh" openssl gcc
bench_start_run tls-providers

# Stubs that stand for cmake and go: a build that needs them fails here.
STUBS=$OUT/stubs
mkdir -p "$STUBS"
for tool in cmake go; do
    printf '#!/bin/sh\necho "%s $*" >>"%s/called.txt"\nexit 1\n' "$tool" "$STUBS" >"$STUBS/$tool"
    chmod +x "$STUBS/$tool"
done
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}/tls-providers
bench_log "cargo build --release (bench/tls-providers; log: $OUT/cargo-build.log)"
start=$(date +%s.%N)
if ! PATH="$STUBS:$PATH" CARGO_TARGET_DIR=$TARGET \
    cargo build --release --manifest-path "$ROOT/bench/tls-providers/Cargo.toml" >"$OUT/cargo-build.log" 2>&1; then
    tail -n 30 "$OUT/cargo-build.log" >&2
    bench_die "the build failed (see $OUT/cargo-build.log)"
fi
build_s=$(python3 -c "import sys; print(round($(date +%s.%N) - $start, 1))")
[[ -s $STUBS/called.txt ]] && bench_die "the build called $(sort -u "$STUBS/called.txt" | tr '\n' ' ')"

for kind in ecdsa rsa; do
    case $kind in
        ecdsa) alg=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
        rsa) alg=(-newkey rsa:2048) ;;
    esac
    openssl req -x509 "${alg[@]}" -nodes -days 30 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost" -keyout "$OUT/$kind.key" -out "$OUT/$kind.pem" 2>/dev/null
done

PINNED=()
[[ $PIN == 1 ]] && (($(nproc) >= 2)) && PINNED=(taskset -c 1)
{
    printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf 'git_commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    printf 'build_seconds\t%s\n' "$build_s"
    printf 'aws_lc_sys\t%s\n' "$(grep -A1 'name = "aws-lc-sys"' "$ROOT/bench/tls-providers/Cargo.lock" | sed -n 2p)"
    printf 'loadavg_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf 'settings\t%ss per figure, pinning %s\n' "$DUR" "$( ((${#PINNED[@]})) && echo 'CPU 1' || echo off)"
} >"$OUT/meta.tsv"
"${PINNED[@]}" "$TARGET/release/tls-providers" "$OUT" "$DUR" | tee "$OUT/results.tsv"
printf 'loadavg_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.tsv"
cat "$OUT/meta.tsv"
bench_log "results in $OUT"
