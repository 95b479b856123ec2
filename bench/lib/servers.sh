# shellcheck shell=bash
# The servers the benchmark scripts compare (bench/static.sh,
# bench/cpu_per_response.sh): the docroot they serve, starting each from its
# template in bench/peers/ (nginx, lighttpd, h2o, tern's variants) or the
# minimal C responder, checking what it serves, and stopping it. Source it
# after common.sh; it defines functions only. They read the caller's OUT,
# WORKERS, MAXFDS, SERVER_PIN, SERVER_CPUS, PIN, TERN_BIN, TERN_OK, SKIPS,
# SIZE_LIST and SIZE_BYTES.
#
# The minimal responder answers every request with one body from memory:
# minimal (1 KiB), minimal-40k and minimal-1m (SIZE_BYTES of the suffix).
#
# tern's variants: tern-default (the defaults: event, static.io "auto"),
# tern-sendfile, tern-mmap, tern-read (one I/O method), tern-uring
# (server.model "uring", static.io "auto"), tern-uring-io (the uring
# model with static.io "uring") and tern-uring-batch (the uring model with
# server.batch_wait = BATCH_WAIT, default "200us").

# Files of exactly 1 KiB, 40 KiB and 1 MiB with deterministic content.
make_docroot() {
    DOCROOT=$OUT/docroot
    mkdir -p "$DOCROOT"
    local size
    for size in "${!SIZE_BYTES[@]}"; do
        head -c "${SIZE_BYTES[$size]}" \
            < <(yes 'tern static benchmark: the same bytes every run. 0123456789abcdefghijklmnopqrstuvwxyz') \
            >"$DOCROOT/$size.bin"
    done
}

# minimal_bytes NAME: the body size of minimal responder NAME.
minimal_bytes() {
    local size=${1#minimal}
    size=${size#-}
    echo "${SIZE_BYTES[${size:-1k}]}"
}

# render TEMPLATE OUTFILE MAXCONN: fill in a config template.
render() {
    sed -e "s|@PORT@|$PORT|g" -e "s|@WORKERS@|$WORKERS|g" -e "s|@RUNDIR@|$RUNDIR|g" \
        -e "s|@DOCROOT@|$DOCROOT|g" -e "s|@MAXCONN@|$3|g" -e "s|@MAXFDS@|$MAXFDS|g" "$1" >"$2"
    if grep -v '^[[:space:]]*#' "$2" | grep -q '@[A-Z]*@'; then bench_die "unfilled placeholder in $2"; fi
}

# start_server NAME PHASE: start it in $OUT/NAME-PHASE; sets SRV_PID and PORT.
# Returns 1 (after saying why) when it does not come up.
start_server() {
    local name=$1 phase=$2
    RUNDIR=$OUT/$name-$phase
    mkdir -p "$RUNDIR"
    PORT=$(free_port)
    local -a cmd
    case $name in
        nginx)
            # worker_connections is per worker.
            render "$ROOT/bench/peers/nginx.conf.tmpl" "$RUNDIR/nginx.conf" $((MAXFDS / 2 < 10000 ? MAXFDS / 2 : 10000))
            cmd=(nginx -e "$RUNDIR/error.log" -c "$RUNDIR/nginx.conf" -p "$RUNDIR/") ;;
        lighttpd)
            # lighttpd caps max-connections at max-fds/2, per worker process.
            render "$ROOT/bench/peers/lighttpd.conf.tmpl" "$RUNDIR/lighttpd.conf" $((MAXFDS / 2 < 10000 ? MAXFDS / 2 : 10000))
            cmd=(lighttpd -D -f "$RUNDIR/lighttpd.conf") ;;
        h2o)
            render "$ROOT/bench/peers/h2o.conf.tmpl" "$RUNDIR/h2o.conf" $((MAXFDS - 100 < 20000 ? MAXFDS - 100 : 20000))
            cmd=(h2o -c "$RUNDIR/h2o.conf") ;;
        minimal*)
            cmd=("$OUT/responder" -a 127.0.0.1 -p "$PORT" -t "$WORKERS" -s "$(minimal_bytes "$name")") ;;
        tern-*)
            if [[ $TERN_OK != 1 ]]; then return 1; fi
            render "${TERN_TEMPLATE:-$ROOT/bench/peers/tern.toml.tmpl}" "$RUNDIR/tern.toml" $((MAXFDS - 100 < 20000 ? MAXFDS - 100 : 20000))
            cmd=("$TERN_BIN" serve "$DOCROOT" --listen "127.0.0.1:$PORT" --workers "$WORKERS"
                 --access-log off --config "$RUNDIR/tern.toml")
            case $name in
                tern-default) ;;
                tern-uring) cmd+=(--model uring) ;;
                tern-uring-io) cmd+=(--model uring --io uring) ;;
                tern-uring-batch)
                    cmd+=(--model uring)
                    sed -i "s/^\[server\]\$/[server]\nbatch_wait = \"${BATCH_WAIT:-200us}\"/" "$RUNDIR/tern.toml" ;;
                *) cmd+=(--io "${name#tern-}") ;;
            esac ;;
    esac
    printf '%q ' "${cmd[@]}" >"$RUNDIR/command.txt"
    # Own session and process group: lighttpd signals its whole process group
    # (kill(0, SIGTERM)) when it stops, which would otherwise include us.
    setsid "${SERVER_PIN[@]}" "${cmd[@]}" >"$RUNDIR/stdout.log" 2>"$RUNDIR/stderr.log" </dev/null &
    SRV_PID=$!
    BENCH_PIDS+=("$SRV_PID")
    local probe=/1k.bin
    if ! wait_http "http://127.0.0.1:$PORT$probe" "$SRV_PID" 15; then
        local why
        why=$(tail -q -n 5 "$RUNDIR/stderr.log" "$RUNDIR/error.log" 2>/dev/null | tr '\n' ' ' | cut -c1-400)
        stop_tree "$SRV_PID"
        if [[ $name == tern-* ]]; then
            bench_banner "tern ($name) did not start: its rows are SKIPPED." \
                         "command: $(cat "$RUNDIR/command.txt")" "output: $why"
        else
            bench_banner "$name did not start; its rows are missing." "output: $why"
        fi
        echo "$name: did not start ($phase): $why" >>"$SKIPS"
        return 1
    fi
    # After the start-up calibration: its reader threads may run anywhere.
    [[ $name != tern-default && $name != tern-uring* ]] || save_io_decision "$name"
    check_pinning "$name"
    return 0
}

# The default config measures its I/O methods at start (static.io = "auto"):
# wait for the decision (wait_calibrated) and keep it, as the status page says it.
save_io_decision() {
    local name=$1
    wait_calibrated "http://127.0.0.1:$PORT" "$RUNDIR/status.json" || true
    python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1]))["io"], open(sys.argv[2], "w"))' \
        "$RUNDIR/status.json" "$RUNDIR/io.json" 2>/dev/null || true
    bench_log "$name: static.io decision: $(python3 -c 'import json,sys; io=json.load(open(sys.argv[1])); print(io["source"], "; ".join(c["class"] + " " + c["method"] for c in io["classes"]))' "$RUNDIR/io.json" 2>/dev/null || echo unknown)"
}

# Warn when a server moved some of its threads off the CPUs we gave it.
check_pinning() {
    [[ $PIN == 1 ]] || return 0
    local pid st list bad=0
    for pid in $(proc_tree "$SRV_PID"); do
        for st in /proc/"$pid"/task/*/status; do
            list=$(awk '/^Cpus_allowed_list/ {print $2}' "$st" 2>/dev/null) || continue
            [[ -z $list || $list == "$SERVER_CPUS" ]] || bad=1
        done
    done
    ((bad == 0)) || bench_banner "$1 runs threads outside CPU $SERVER_CPUS (it sets its own affinity):" \
                                 "its numbers are not pinned like the others'."
}

stop_server() {
    stop_tree "$SRV_PID"
    forget_pid "$SRV_PID"
}

# Every file must come back whole and identical (the minimal responder only
# answers 1 KiB and ignores what is asked). Prints the problem and returns 1.
verify_content() {
    local name=$1 size got
    for size in "${SIZE_LIST[@]}"; do
        if [[ $name == minimal* ]]; then
            local want
            want=$(minimal_bytes "$name")
            got=$(curl -s -m 5 -o /dev/null -w '%{size_download}' "http://127.0.0.1:$PORT/$size.bin") || true
            [[ $got == "$want" ]] || { echo "minimal responder sent ${got:-no} bytes, not $want"; return 1; }
            return 0
        fi
        if ! curl -sf -m 10 -o "$RUNDIR/check-$size.bin" "http://127.0.0.1:$PORT/$size.bin"; then
            echo "GET /$size.bin failed"; return 1
        fi
        if ! cmp -s "$RUNDIR/check-$size.bin" "$DOCROOT/$size.bin"; then
            echo "/$size.bin: the body differs from the docroot file (kept as $RUNDIR/check-$size.bin)"
            return 1
        fi
        rm -f "$RUNDIR/check-$size.bin"
    done
}

# start_checked NAME PHASE: start_server, then verify_content; on a failure
# says so loudly, records the skip and returns 1.
start_checked() {
    local name=$1 phase=$2 problem
    start_server "$name" "$phase" || return 1
    if ! problem=$(verify_content "$name"); then
        bench_banner "$name serves wrong content: its rows are SKIPPED." "$problem"
        echo "$name: wrong content: $problem" >>"$SKIPS"
        stop_server
        return 1
    fi
}
