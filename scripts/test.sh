#!/usr/bin/env bash
# Installs the system packages the tests need (only those missing) and runs
# every test: the Rust workspace (unit and end-to-end), the C gateway
# library, and a short fuzz smoke of the request and response parsers.
set -euo pipefail
cd "$(dirname "$0")/.."

# curl: a real client in the end-to-end tests; util-linux (taskset) for the
# CPU-affinity check; perl and python3 run CGI programs in the CGI tests; gcc
# and make build the C gateway and test programs; man-db (man -l) renders the
# generated manual pages and systemd (systemd-analyze verify) checks the unit;
# php-fpm (and iproute2's ss) for the FastCGI tests, libfcgi-dev for the
# gateway's FastCGI file server; chromium (headless) takes the demo site's
# screenshots; openssl (s_client) checks the TLS versions, SNI and resumption;
# fuse3 (fusermount3) and python3-fusepy mount the slow file system of the
# slow-disk test; hyperfine is the reference the probe's command timing is
# checked against; wrk drives the sites' reload under load, checking every
# response with a script; python3-websockets is the WebSocket echo server and
# client of the proxy tests (their Go and Node upstreams use the machine's Go
# and Node); h2o and nginx are the HTTP/2 servers `tern bench --h2` is
# checked against, nghttp2-client's nghttp uploads over HTTP/2 in the h2
# tests. bench/soak.sh installs what it needs itself.
scripts/ensure-packages.sh curl openssl util-linux perl python3 gcc make man-db systemd php-fpm iproute2 libfcgi-dev chromium \
    fuse3 python3-fusepy hyperfine wrk python3-websockets h2o nginx nghttp2-client
# h2spec, the HTTP/2 conformance suite of the h2 tests, is a Go program.
scripts/ensure-go-tools.sh

echo "== gateway (C library); its example CGIs are used by the end-to-end tests"
make -C gateway test

echo "== cargo test (workspace)"
# The runs the tests make with `tern bench` and `tern probe` are recorded in
# a store of their own, not in the user's lab.
export XDG_DATA_HOME="$PWD/target/test-data"
cargo test --workspace --locked

# The end-to-end suite once more per thread model (the run above was the
# default, event): one suite, the model picked by $TERN_MODEL in the harness.
# uring moves the bytes itself (completion I/O), so it also runs the tests
# of TLS, slow disks, service records and the rest that start a server.
suite=(--test static_files --test static_io --test corpus --test traversal --test hidden_files
    --test changing_files --test sent_bytes --test compression --test cgi --test cgi_endings
    --test fastcgi --test slow_clients --test limits --test hardening --test accept_burst
    --test operations --test reload --test sites --test proxy --test h2)
for model in pool staged per-request uring; do
    echo "== end-to-end suite, server.model = $model"
    extra=()
    if [ "$model" = uring ]; then
        extra=(--test tls --test slow_disk --test service_records --test demo_site --test fastcgi_files
            --test ports --test privileges --test program_sources)
    fi
    TERN_MODEL=$model cargo test -p tern --locked "${suite[@]}" "${extra[@]}"
done

# A minute of mixed load while every fault of the soak hits the server once
# (reload, php-fpm killed, crashing and hanging CGIs, a truncated file, a full
# log disk, the descriptor limit, a lossy network namespace): it exits 1 when
# its judgement fails. The debug binary the tests built: it calibrates its load
# to what that binary carries. Needs root (tmpfs, network namespace).
echo "== soak, short (bench/soak.sh --short --no-peer)"
TERN_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/tern" bench/soak.sh --short --no-peer

echo "all tests passed"
