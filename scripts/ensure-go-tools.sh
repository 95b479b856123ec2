#!/usr/bin/env bash
# ensure-go-tools.sh
#
# Installs, with `go install` (through the Go module proxy), the Go programs
# the tests use that are not installed yet, into `$(go env GOPATH)/bin`, and
# prints what it installed; prints nothing when all are there. Needs Go
# (scripts/test.sh's Go upstreams use the machine's Go too).
#
#   h2spec  the HTTP/2 conformance suite (crates/tern/tests/h2.rs)
set -euo pipefail

readonly PROG=ensure-go-tools
# name -> module path@version
readonly -A TOOLS=(
    [h2spec]=github.com/summerwind/h2spec/cmd/h2spec@latest
)

command -v go >/dev/null || { echo "$PROG: error: go is not installed" >&2; exit 1; }
bin="$(go env GOPATH)/bin"
for name in "${!TOOLS[@]}"; do
    if [[ -x $bin/$name ]] || command -v "$name" >/dev/null; then
        continue
    fi
    echo "$PROG: installing: $name" >&2
    go install "${TOOLS[$name]}"
    echo "$PROG: installed: $name ($bin/$name)" >&2
done
