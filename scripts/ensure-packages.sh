#!/usr/bin/env bash
# ensure-packages.sh PKG...
#
# Installs, with apt-get, exactly those Debian packages among its arguments that
# are not installed yet, and prints what it installed. When everything is already
# there it only asks dpkg (well under a second) and prints nothing.
#
# It never starts services: packages such as nginx, lighttpd and h2o start their
# system service (on port 80) from their maintainer scripts; while installing we
# put a policy-rc.d in place that forbids that (unless one already exists), and
# afterwards stop and disable the service of any such package we installed, so
# the project's benchmarks and tests (own configs on 127.0.0.1 high ports) never
# compete with a system daemon.
#
# Concurrent callers are serialised with flock; apt-get waits for the dpkg lock.
# Exit status: 0 when every package is installed afterwards, non-zero (with a
# message on stderr) otherwise.
set -euo pipefail

readonly PROG=ensure-packages
readonly LOCK_FILE=/var/lock/tern-ensure-packages.lock
readonly POLICY_RC=/usr/sbin/policy-rc.d
# Daemons whose maintainer scripts start a service we never want running
# (shell patterns matched against init script / unit names).
readonly SERVICE_PATTERNS=(nginx lighttpd h2o haproxy caddy 'php*-fpm' fcgiwrap apache2)

die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "$PROG: $*" >&2; }

usage() {
    echo "usage: $0 PKG..." >&2
    exit 2
}

# Prints, one per line, the arguments that are not fully installed.
missing_packages() {
    local status
    declare -A installed=()
    # One dpkg-query for all names; unknown names make it exit 1 (ignored).
    while IFS=$'\t' read -r name status; do
        [[ $status == "install ok installed" ]] && installed[$name]=1
    done < <(dpkg-query -W -f='${Package}\t${Status}\n' "$@" 2>/dev/null || true)
    local pkg
    for pkg in "$@"; do
        [[ -n ${installed[${pkg%%:*}]:-} ]] || echo "$pkg"
    done
}

# Forbid service starts during installation when no policy exists yet.
# Sets POLICY_CREATED=1 when we created the file (and must remove it).
POLICY_CREATED=0
install_policy() {
    if [[ ! -e $POLICY_RC ]]; then
        printf '#!/bin/sh\n# temporary, from tern scripts/ensure-packages.sh\nexit 101\n' >"$POLICY_RC"
        chmod 755 "$POLICY_RC"
        POLICY_CREATED=1
    fi
}

remove_policy() {
    if [[ $POLICY_CREATED == 1 ]]; then
        rm -f "$POLICY_RC"
        POLICY_CREATED=0
    fi
}

# Names of the init scripts and systemd units of the daemons above.
list_services() {
    local f name pat
    for f in /etc/init.d/* /lib/systemd/system/*.service /lib/systemd/system/*.socket; do
        [[ -e $f ]] || continue
        name=${f##*/}
        for pat in "${SERVICE_PATTERNS[@]}"; do
            # shellcheck disable=SC2053  # $pat is a glob on purpose
            if [[ ${name%.*} == $pat ]]; then echo "$name"; break; fi
        done
    done | sort -u
}

# Stop and disable each daemon service that appeared during our installation.
quiet_services() {
    local svc
    for svc in "$@"; do
        if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
            [[ $svc == *.service || $svc == *.socket ]] || continue
            systemctl disable --now "$svc" >/dev/null 2>&1 || true
        else
            [[ $svc != *.* && -x /etc/init.d/$svc ]] || continue
            if /etc/init.d/"$svc" status >/dev/null 2>&1; then
                /etc/init.d/"$svc" stop >/dev/null 2>&1 || true
            fi
            if command -v update-rc.d >/dev/null; then
                update-rc.d "$svc" disable >/dev/null 2>&1 || true
            fi
        fi
        log "service $svc: stopped (if running) and disabled"
    done
}

main() {
    [[ $# -gt 0 ]] || usage
    command -v dpkg-query >/dev/null || die "dpkg-query not found: this script needs Debian or a derivative"

    local -a missing
    mapfile -t missing < <(missing_packages "$@")
    [[ ${#missing[@]} -eq 0 ]] && return 0

    [[ $(id -u) -eq 0 ]] || die "missing packages (${missing[*]}) and not root: run 'sudo apt-get install ${missing[*]}'"
    command -v apt-get >/dev/null || die "apt-get not found; cannot install: ${missing[*]}"

    exec 9>"$LOCK_FILE"
    flock -w 900 9 || die "timed out waiting for $LOCK_FILE (another install running?)"
    # Someone may have installed them while we waited for the lock.
    mapfile -t missing < <(missing_packages "${missing[@]}")
    [[ ${#missing[@]} -eq 0 ]] && return 0

    trap remove_policy EXIT
    install_policy

    export DEBIAN_FRONTEND=noninteractive
    local -a apt_opts=(-y -q -o DPkg::Lock::Timeout=600
                       -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
    local out before
    out=$(mktemp)
    before=$(list_services)
    log "installing: ${missing[*]}"
    if ! apt-get "${apt_opts[@]}" update >"$out" 2>&1; then
        tail -n 20 "$out" >&2; rm -f "$out"
        die "apt-get update failed (needed to install: ${missing[*]})"
    fi
    if ! apt-get "${apt_opts[@]}" install "${missing[@]}" >"$out" 2>&1; then
        tail -n 30 "$out" >&2; rm -f "$out"
        die "apt-get install failed for: ${missing[*]}"
    fi
    rm -f "$out"
    local -a new_services
    mapfile -t new_services < <(comm -13 <(echo "$before") <(list_services) | sed '/^$/d')
    quiet_services "${new_services[@]}"
    remove_policy

    local -a still
    mapfile -t still < <(missing_packages "${missing[@]}")
    [[ ${#still[@]} -eq 0 ]] || die "still not installed after apt-get: ${still[*]}"
    echo "$PROG: installed: ${missing[*]}"
}

main "$@"
