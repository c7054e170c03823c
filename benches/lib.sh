# Shared by the benches (sourced): release daemons on loopback, each in a directory of its
# own, stopped when the script exits.
#
#   bench_daemon DIR [SANDBOX] [EXTRA_TOML]
# writes DIR/slipway.toml (TLS off, apps at *.localhost, rate limits out of the way, sandbox
# SANDBOX, default none; EXTRA_TOML appended, e.g. a [limits] table), starts "$BIN" serve
# (${WRAP:-} in front, e.g. WRAP=heaptrack) with its stdout in DIR/out and its log in DIR/log,
# waits up to 30 s for "ready" and sets DAEMON_PID, DAEMON_ADDR (http host:port) and
# DAEMON_TOKEN. Stops the script, showing the log, if the daemon does not start.

BENCH_PIDS=()
bench_stop_daemons() {
    for pid in "${BENCH_PIDS[@]}"; do
        # A wrapper (heaptrack's script) does not pass the signal on: stop its daemon first,
        # or the daemon outlives the script (holding the bench lock's descriptor).
        if [ -n "${WRAP:-}" ]; then pkill -TERM -P "$pid" -x slipway 2>/dev/null || true; fi
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}

bench_daemon() {
    local dir=$1 sandbox=${2:-none} extra=${3:-}
    mkdir -p "$dir"
    cat >"$dir/slipway.toml" <<TOML
data_dir = "$dir/data"
apps_domain = "localhost"
http_listen = "127.0.0.1:0"
https_listen = "127.0.0.1:0"
[tls]
mode = "off"
[sandbox]
mode = "$sandbox"
[rate_limits]
requests_per_minute = 10000000
posts_per_minute_per_endpoint = 10000000
$extra
TOML
    ${WRAP:-} "$BIN" serve --config "$dir/slipway.toml" >"$dir/out" 2>"$dir/log" &
    DAEMON_PID=$!
    BENCH_PIDS+=("$DAEMON_PID")
    for _ in $(seq 300); do grep -q '^ready' "$dir/out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^ready' "$dir/out" || { echo "the daemon in $dir did not start:" >&2; tail -20 "$dir/log" >&2; exit 1; }
    DAEMON_ADDR="$(sed -n 's/^listening http //p' "$dir/out")"
    DAEMON_TOKEN="$(cat "$dir/data/initial-admin-token")"
}
