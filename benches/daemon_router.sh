#!/usr/bin/env bash
# Measures the real daemon's router (`slipway serve`, release build) next to nginx, HAProxy and
# Caddy proxying the same backend, and next to nginx serving the same static files, in one run.
#
# For each sandbox mode (default: `none`, then `namespaces` when run as root) it starts the
# daemon on 127.0.0.1:0 with TLS off, deploys through the API (curl):
#   - bench-app: a server-mode project whose start command runs nginx itself as the app, on
#     $PORT, answering a 23-byte body. The front proxies dial the SAME backend address, read
#     from the deployment's system log line "app is accepting connections on port N (ADDR)".
#   - bench-static: a static project with a 1 KiB and a 100 KiB file, which nginx also serves
#     from a copy of the same files.
# then runs `wrk -t1 -c64 -d10s --latency` against each target (Host `<slug>.localhost` for the
# daemon) and prints req/s, p99 and the proxy's CPU time per request (utime + stime deltas of
# /proc/<pid>/stat) with the ratios to nginx.
#
# Needs: wrk nginx haproxy caddy curl python3 (Debian packages) and cargo.
#
#   benches/daemon_router.sh                    # both modes as root, 2 interleaved rounds
#   MODES=none ROUNDS=1 DURATION=5s benches/daemon_router.sh
#   SLIPWAY_BIN=target/release/slipway benches/daemon_router.sh   # skip the cargo build
#   METRICS_OFF=1 MODES=none ROUNDS=2 DURATION=5s benches/daemon_router.sh
#       # adds a second daemon with `[metrics] requests = false` (same apps) and a table of
#       # req/s and CPU per request with request metrics on vs off
#   METRICS_OFF=1 METRICS_ONLY=1 MODES=none ROUNDS=6 DURATION=5s benches/daemon_router.sh
#       # only the two daemons (proxy and static 1 KiB), the order swapped every round
#   EDGE_BIN=target/release/deps/edge_server-<hash> benches/daemon_router.sh
#       # adds benches/edge_server.rs (bare Proxy::forward / StaticSite) on the same backend
#       # and files, to separate the daemon's own overhead from the proxy's
#
# wrk only ever targets 127.0.0.1. The front proxies dial the backend the daemon reports: on
# 127.0.0.1 in mode `none`; in mode `namespaces` at the app's address inside the network
# namespace the daemon created for it (the script checks that it lies in the sandbox subnet it
# configured). Every process the script starts is stopped by pid; all files live in one temp dir.
set -euo pipefail

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-2}
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${MODES:-}" ]; then
    if [ "$(id -u)" = 0 ]; then MODES="none namespaces"; else MODES="none"; fi
fi

for tool in wrk nginx haproxy caddy curl python3; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 0; }
done

WORK=$(mktemp -d /tmp/slipway-daemon-bench.XXXXXX)
MARK=$(basename "$WORK")
PIDS=()        # every process started by this script, stopped by pid
DAEMON_PID=""  # the current daemon, stopped with SIGTERM so that it stops its apps
BACKEND_PID="" # the app's nginx master, stopped by pid should the daemon leave it behind
stop_pid() { # pid: SIGTERM, up to 10 s, then SIGKILL
    local pid=$1
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
stop_pass() {
    local pid
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    PIDS=()
    [ -n "$DAEMON_PID" ] && stop_pid "$DAEMON_PID"
    DAEMON_PID=""
    if [ -n "$BACKEND_PID" ] && kill -0 "$BACKEND_PID" 2>/dev/null; then stop_pid "$BACKEND_PID"; fi
    BACKEND_PID=""
}
cleanup() {
    stop_pass
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${SLIPWAY_BIN:-}" ]; then
    BIN=$(cd "$(dirname "$SLIPWAY_BIN")" && pwd)/$(basename "$SLIPWAY_BIN")
else
    command -v cargo >/dev/null || { echo "SKIP: cargo is not installed" >&2; exit 0; }
    echo "building the daemon (cargo build --release)..." >&2
    (cd "$REPO" && cargo build --release --quiet)
    BIN="$REPO/target/release/slipway"
fi
[ -x "$BIN" ] || { echo "no daemon binary at $BIN" >&2; exit 1; }

# The static files (also served by nginx) and the app's source: an nginx.conf template the start
# command fills in with sed, since only PORT is known when the app starts.
mkdir -p "$WORK/site" "$WORK/app"
python3 -c 'import sys, random, string
for name, size in (("1k.txt", 1024), ("100k.txt", 102400)):
    open(f"{sys.argv[1]}/{name}", "w").write("".join(random.choices(string.ascii_letters, k=size)))' "$WORK/site"
cat >"$WORK/app/nginx.conf.in" <<'EOF'
worker_processes 2;
pid @TMP@/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path @TMP@; proxy_temp_path @TMP@; fastcgi_temp_path @TMP@;
    uwsgi_temp_path @TMP@; scgi_temp_path @TMP@;
    keepalive_requests 1000000;
    server {
        listen @HOST@:@PORT@;
        location / { return 200 'hello from the backend\n'; }
    }
}
EOF
tar czf "$WORK/app.tgz" -C "$WORK/app" .
tar czf "$WORK/site.tgz" -C "$WORK/site" .
# shellcheck disable=SC2016 # expanded by the app's shell, not this one
START_COMMAND='PATH="$PATH:/usr/sbin" T="$BENCH_TMP/nginx" && mkdir -p "$T" && sed -e "s|@TMP@|$T|g" -e "s|@HOST@|$BENCH_HOST|" -e "s|@PORT@|$PORT|" nginx.conf.in >"$T/nginx.conf" && exec nginx -p "$T" -e stderr -c "$T/nginx.conf" -g "daemon off;"'

# CPU ticks (utime + stime, all threads) of a process, plus its direct children when asked.
cpu_ticks() { # pid, with_children (0|1)
    local total=0 pid pids=$1
    [ "$2" = 1 ] && pids="$1 $(ps --ppid "$1" -o pid= 2>/dev/null | tr '\n' ' ')"
    for pid in $pids; do
        [ -r "/proc/$pid/stat" ] || continue
        total=$((total + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
TICKS=$(getconf CLK_TCK)

nginx_conf() { # dir, server block
    mkdir -p "$1"
    cat >"$1/nginx.conf" <<EOF
user root;
worker_processes 2;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $1; proxy_temp_path $1; fastcgi_temp_path $1;
    uwsgi_temp_path $1; scgi_temp_path $1;
    keepalive_requests 1000000;
    include /etc/nginx/mime.types;
    $2
}
EOF
}

start() { # variable for the pid, log file, command...
    local var=$1 log=$2; shift 2
    "$@" >"$log" 2>&1 &
    PIDS+=($!)
    printf -v "$var" '%s' "$!"
}

free_ports() { # count: loopback ports free now, chosen by the kernel (bound together, then closed)
    python3 -c 'import socket, sys
held = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); held.append(s)
print(" ".join(str(s.getsockname()[1]) for s in held))' "$1"
}

wait_http() { # url [pid [log]]: up to 30 s for any HTTP answer; fails at once if pid exits
    for _ in $(seq 1 300); do
        curl -s -o /dev/null --max-time 2 "$1" && return 0
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
            echo "the server for $1 exited:" >&2; [ -n "${3:-}" ] && tail -20 "$3" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "no answer from $1 within 30 s" >&2; [ -n "${3:-}" ] && tail -20 "$3" >&2
    return 1
}

check_body() { # label, expected size, url [host header]
    local size
    size=$(curl -sf --max-time 5 -o /dev/null -w '%{size_download}' ${4:+-H "Host: $4"} "$3") || {
        echo "$1: request to $3 failed" >&2; return 1; }
    [ "$size" = "$2" ] || { echo "$1: $size bytes from $3, expected $2" >&2; return 1; }
}

# One wrk run; appends "label rate p99 cpu backend_cpu non2xx socket_errors mode" to RESULTS.
run() { # label, pid, with_children, backend pid or "", url, [host header]
    local label=$1 pid=$2 children=$3 backend=$4 url=$5 host=${6:-}
    local header=()
    [ -n "$host" ] && header=(-H "Host: $host")
    wrk -t1 -c16 -d1s "${header[@]}" "$url" >/dev/null # warm-up (pools, caches)
    local before after backend_before=0 backend_after=0
    before=$(cpu_ticks "$pid" "$children")
    [ -n "$backend" ] && backend_before=$(cpu_ticks "$backend" 1)
    # PROFILE=<dir>: perf records the Slipway targets (call graphs by frame pointer/DWARF).
    local perf_pid=""
    if [ -n "${PROFILE:-}" ] && [[ "$label" == Slipway* ]]; then
        mkdir -p "$PROFILE"
        perf record -q -g --call-graph dwarf,16384 -F 499 -p "$pid" \
            -o "$PROFILE/${label// /_}.$MODE.data" 2>/dev/null &
        perf_pid=$!
        sleep 0.5
    fi
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "${header[@]}" "$url" >"$WORK/wrk.out"
    if [ -n "$perf_pid" ]; then kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; fi
    after=$(cpu_ticks "$pid" "$children")
    [ -n "$backend" ] && backend_after=$(cpu_ticks "$backend" 1)
    python3 - "$label" "$((after - before))" "$((backend_after - backend_before))" "$TICKS" \
        "$MODE" "$WORK/wrk.out" >>"$RESULTS" <<'PY'
import re, sys
label, ticks, backend_ticks, per_second, mode, path = sys.argv[1:7]
text = open(path).read()
requests = int(re.search(r"(\d+) requests in", text).group(1))
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)
p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
def per_request(t):
    return int(t) / int(per_second) * 1e6 / max(requests, 1)
print("\t".join([label, f"{rate:.0f}", f"{p99_ms:.2f}", f"{per_request(ticks):.1f}",
                 f"{per_request(backend_ticks):.1f}", non2xx.group(1) if non2xx else "0",
                 str(sum(map(int, socket.groups()))) if socket else "0", mode]))
PY
    tail -n1 "$RESULTS" >&2
}

# The nginx master of the app: the process whose command line names its temp dir ($1).
find_backend_master() {
    local dir pid args pattern=$1
    for _ in $(seq 1 50); do
        for dir in /proc/[0-9]*; do
            args=$(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null) || continue
            case "$args" in
            "nginx: master process"*"-p $pattern/"*)
                pid=${dir#/proc/}
                echo "$pid"
                return 0
                ;;
            esac
        done
        sleep 0.1
    done
    return 1
}

# Starts a daemon in DIR (sandbox $MODE, `[metrics] requests = REQUESTS`, its own sandbox
# instance) and deploys bench-app and bench-static on it; sets ADDR, TOKEN, BACKEND, UP_PID and
# UP_BACKEND_PID.
daemon_up() { # dir, true|false, sandbox instance
    local D=$1 REQUESTS=$2 INSTANCE=$3
    mkdir -p "$D"
    SUBNET_A=$((220 + RANDOM % 30)); SUBNET_B=$((RANDOM % 256))
    cat >"$D/slipway.toml" <<TOML
data_dir = "$D/data"
apps_domain = "localhost"
http_listen = "127.0.0.1:0"
https_listen = "127.0.0.1:0"
[tls]
mode = "off"
[sandbox]
mode = "$MODE"
subnet = "10.$SUBNET_A.$SUBNET_B.0/24"
instance = "$INSTANCE"
[metrics]
requests = $REQUESTS
[rate_limits]
requests_per_minute = 100000
posts_per_minute_per_endpoint = 100000
TOML
    "$BIN" serve --config "$D/slipway.toml" >"$D/daemon.out" 2>"$D/daemon.log" &
    UP_PID=$!
    PIDS+=("$UP_PID") # stopped (SIGTERM first, so it stops its app) by stop_pass
    for _ in $(seq 1 150); do grep -q '^ready' "$D/daemon.out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^ready' "$D/daemon.out" || { echo "the daemon did not start:" >&2; tail -20 "$D/daemon.log" >&2; exit 1; }
    ADDR=$(sed -n 's/^listening http //p' "$D/daemon.out")
    case "$ADDR" in 127.0.0.1:*) ;; *) echo "unexpected daemon address $ADDR" >&2; exit 1 ;; esac
    TOKEN=$(cat "$D/data/initial-admin-token")
    api() { # method, path, curl arguments...
        local method=$1 path=$2; shift 2
        curl -sS --fail-with-body --max-time 30 -X "$method" -H "Authorization: Bearer $TOKEN" \
            -H "Host: slipway.localhost" "$@" "http://$ADDR/api$path"
    }
    json() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }

    # Deploy both projects.
    if [ "$MODE" = namespaces ]; then APP_TMP="/tmp/$MARK-$INSTANCE" APP_HOST="0.0.0.0"; else APP_TMP="$D/apptmp" APP_HOST="127.0.0.1"; fi
    api POST /projects -H 'Content-Type: application/json' -d '{"slug":"bench-app"}' >/dev/null
    api POST /projects -H 'Content-Type: application/json' -d '{"slug":"bench-static"}' >/dev/null
    api POST /projects/bench-app/env-vars -H 'Content-Type: application/json' \
        -d "{\"BENCH_TMP\":\"$APP_TMP\",\"BENCH_HOST\":\"$APP_HOST\"}" >/dev/null
    api POST /projects/bench-app/source -H 'Content-Type: application/gzip' --data-binary @"$WORK/app.tgz" >/dev/null
    api POST /projects/bench-static/source -H 'Content-Type: application/gzip' --data-binary @"$WORK/site.tgz" >/dev/null
    provision() { # slug, body → deployment id, once provisioning_complete
        local started id status
        started=$(api POST "/projects/$1/provision" -H 'Content-Type: application/json' -d "$2")
        id=$(json '["provisioningId"]' <<<"$started")
        for _ in $(seq 1 240); do
            status=$(api GET "/provisioning/$id/status")
            [ "$(json '["status"]' <<<"$status")" = provisioning_in_progress ] || break
            sleep 0.5
        done
        [ "$(json '["status"]' <<<"$status")" = provisioning_complete ] || {
            echo "provisioning $1 did not complete: $status" >&2; return 1; }
        json '["deploymentId"]' <<<"$status"
    }
    APP_BODY=$(python3 -c 'import json, sys; print(json.dumps({"projectSlug": "bench-app", "startCommand": sys.argv[1]}))' "$START_COMMAND")
    APP_DEPLOYMENT=$(provision bench-app "$APP_BODY")
    provision bench-static '{"projectSlug":"bench-static"}' >/dev/null
    BACKEND=$(api GET "/deployments/$APP_DEPLOYMENT/logs?stream=system" | python3 -c '
import json, re, sys
for line in json.load(sys.stdin)["logs"]:
    m = re.search(r"app is accepting connections on port \d+ \((.+)\)", line["message"])
    if m:
        print(m.group(1))')
    # Only loopback, or the app's address inside the namespace the daemon made from our subnet.
    case "$BACKEND" in
    127.0.0.1:*) ;;
    "10.$SUBNET_A.$SUBNET_B."*:*) [ "$MODE" = namespaces ] || { echo "backend $BACKEND outside loopback" >&2; exit 1; } ;;
    *) echo "refusing to target backend address '$BACKEND'" >&2; exit 1 ;;
    esac
    UP_BACKEND_PID=$(find_backend_master "$APP_TMP") || { echo "cannot find the app's nginx" >&2; exit 1; }
}

RESULTS="$WORK/results.tsv"
LOADS="$WORK/loads.txt"
: >"$RESULTS"
: >"$LOADS"
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, loopback, $(nproc) cores, $ROUNDS rounds, modes: $MODES" >&2

pass=0
for MODE in $MODES; do
    pass=$((pass + 1))
    P="$WORK/$MODE"
    mkdir -p "$P"
    daemon_up "$P" true slwbench
    DAEMON_PID=$UP_PID BACKEND_PID=$UP_BACKEND_PID
    if [ "${METRICS_OFF:-0}" = 1 ]; then
        # The same daemon with request metrics off, to measure what counting costs.
        MAIN_ADDR=$ADDR MAIN_BACKEND=$BACKEND MAIN_TOKEN=$TOKEN
        daemon_up "$P/metrics-off" false slwbenchoff
        OFF_ADDR=$ADDR OFF_BACKEND=$BACKEND
        PIDS+=("$UP_BACKEND_PID") # should the daemon leave its app behind
        ADDR=$MAIN_ADDR BACKEND=$MAIN_BACKEND TOKEN=$MAIN_TOKEN
        echo "metrics off: daemon pid $UP_PID at $OFF_ADDR, backend $OFF_BACKEND" >&2
    fi
    echo "pass $pass: sandbox $MODE, daemon pid $DAEMON_PID at $ADDR, backend $BACKEND (nginx pid $BACKEND_PID)" >&2

    # The front proxies and nginx static, on loopback ports of their own.
    read -r NGINX_PROXY HAPROXY CADDY NGINX_STATIC EDGE_PROXY EDGE_STATIC <<<"$(free_ports 6)"
    nginx_conf "$P/nginx_proxy" "upstream app { server $BACKEND; keepalive 64; }
    server { listen 127.0.0.1:$NGINX_PROXY; location / { proxy_pass http://app; proxy_http_version 1.1;
        proxy_set_header Connection \"\"; proxy_set_header Host \$host;
        proxy_set_header X-Forwarded-For \$remote_addr; proxy_set_header X-Forwarded-Proto \$scheme; } }"
    nginx_conf "$P/nginx_static" "sendfile on; tcp_nopush on; open_file_cache max=100;
    server { listen 127.0.0.1:$NGINX_STATIC; root $WORK/site; }"
    cat >"$P/haproxy.cfg" <<EOF
global
    nbthread 2
    maxconn 4096
defaults
    mode http
    timeout connect 3s
    timeout client 30s
    timeout server 30s
    option http-keep-alive
    option forwardfor
frontend web
    bind 127.0.0.1:$HAPROXY
    default_backend app
backend app
    http-reuse always
    server app $BACKEND
EOF
    cat >"$P/Caddyfile" <<EOF
{
    admin off
    auto_https off
}
http://127.0.0.1:$CADDY {
    reverse_proxy $BACKEND
}
EOF
    start PID_nginx_proxy "$P/nginx_proxy.out" nginx -c "$P/nginx_proxy/nginx.conf" -g 'daemon off;'
    start PID_nginx_static "$P/nginx_static.out" nginx -c "$P/nginx_static/nginx.conf" -g 'daemon off;'
    start PID_haproxy "$P/haproxy.out" haproxy -db -f "$P/haproxy.cfg"
    start PID_caddy "$P/caddy.out" env HOME="$P" XDG_DATA_HOME="$P" XDG_CONFIG_HOME="$P" \
        caddy run --adapter caddyfile --config "$P/Caddyfile"
    PROXY_PORTS="$NGINX_PROXY $HAPROXY $CADDY"
    if [ -n "${EDGE_BIN:-}" ]; then
        start PID_edge_proxy "$P/edge_proxy.out" "$EDGE_BIN" proxy "127.0.0.1:$EDGE_PROXY" "$BACKEND"
        start PID_edge_static "$P/edge_static.out" "$EDGE_BIN" static "127.0.0.1:$EDGE_STATIC" "$WORK/site"
        PROXY_PORTS="$PROXY_PORTS $EDGE_PROXY"
        wait_http "http://127.0.0.1:$EDGE_STATIC/1k.txt" "$PID_edge_static" "$P/edge_static.out"
    fi
    wait_http "http://127.0.0.1:$NGINX_PROXY/" "$PID_nginx_proxy" "$P/nginx_proxy.out"
    wait_http "http://127.0.0.1:$NGINX_STATIC/" "$PID_nginx_static" "$P/nginx_static.out"
    wait_http "http://127.0.0.1:$HAPROXY/" "$PID_haproxy" "$P/haproxy.out"
    wait_http "http://127.0.0.1:$CADDY/" "$PID_caddy" "$P/caddy.out"
    if [ -n "${EDGE_BIN:-}" ]; then
        wait_http "http://127.0.0.1:$EDGE_PROXY/" "$PID_edge_proxy" "$P/edge_proxy.out"
    fi
    for port in $PROXY_PORTS; do check_body proxy 23 "http://127.0.0.1:$port/"; done
    check_body daemon 23 "http://$ADDR/" bench-app.localhost
    check_body "nginx static" 1024 "http://127.0.0.1:$NGINX_STATIC/1k.txt"
    check_body "nginx static" 102400 "http://127.0.0.1:$NGINX_STATIC/100k.txt"
    check_body "daemon static" 1024 "http://$ADDR/1k.txt" bench-static.localhost
    check_body "daemon static" 102400 "http://$ADDR/100k.txt" bench-static.localhost
    if [ "${METRICS_OFF:-0}" = 1 ]; then
        check_body "daemon (metrics off)" 23 "http://$OFF_ADDR/" bench-app.localhost
        check_body "daemon static (metrics off)" 1024 "http://$OFF_ADDR/1k.txt" bench-static.localhost
    fi

    echo "$MODE before: $(cat /proc/loadavg)" >>"$LOADS"
    for round in $(seq 1 "$ROUNDS"); do
        echo "round $round/$ROUNDS, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        if [ "${METRICS_ONLY:-0}" = 1 ]; then
            # Only the daemon with request metrics on and off, the order swapped every round
            # so that drifting load favours neither.
            on_proxy() { run "Slipway daemon proxy" "$DAEMON_PID" 0 "$BACKEND_PID" "http://$ADDR/" bench-app.localhost; }
            off_proxy() { run "Slipway daemon proxy (metrics off)" "$UP_PID" 0 "$UP_BACKEND_PID" "http://$OFF_ADDR/" bench-app.localhost; }
            on_static() { run "Slipway daemon static 1 KiB" "$DAEMON_PID" 0 "" "http://$ADDR/1k.txt" bench-static.localhost; }
            off_static() { run "Slipway daemon static 1 KiB (metrics off)" "$UP_PID" 0 "" "http://$OFF_ADDR/1k.txt" bench-static.localhost; }
            if [ $((round % 2)) = 1 ]; then
                on_proxy; off_proxy; on_static; off_static
            else
                off_proxy; on_proxy; off_static; on_static
            fi
            continue
        fi
        run "nginx proxy (upstream keep-alive)" "$PID_nginx_proxy" 1 "$BACKEND_PID" "http://127.0.0.1:$NGINX_PROXY/"
        run "HAProxy proxy" "$PID_haproxy" 0 "$BACKEND_PID" "http://127.0.0.1:$HAPROXY/"
        run "Caddy proxy" "$PID_caddy" 0 "$BACKEND_PID" "http://127.0.0.1:$CADDY/"
        run "Slipway daemon proxy" "$DAEMON_PID" 0 "$BACKEND_PID" "http://$ADDR/" bench-app.localhost
        if [ "${METRICS_OFF:-0}" = 1 ]; then
            run "Slipway daemon proxy (metrics off)" "$UP_PID" 0 "$UP_BACKEND_PID" "http://$OFF_ADDR/" bench-app.localhost
        fi
        if [ -n "${EDGE_BIN:-}" ]; then
            run "edge_server proxy (bare Proxy::forward)" "$PID_edge_proxy" 0 "$BACKEND_PID" "http://127.0.0.1:$EDGE_PROXY/"
        fi
        run "nginx static 1 KiB" "$PID_nginx_static" 1 "" "http://127.0.0.1:$NGINX_STATIC/1k.txt"
        run "Slipway daemon static 1 KiB" "$DAEMON_PID" 0 "" "http://$ADDR/1k.txt" bench-static.localhost
        if [ "${METRICS_OFF:-0}" = 1 ]; then
            run "Slipway daemon static 1 KiB (metrics off)" "$UP_PID" 0 "" "http://$OFF_ADDR/1k.txt" bench-static.localhost
        fi
        if [ -n "${EDGE_BIN:-}" ]; then
            run "edge_server static 1 KiB" "$PID_edge_static" 0 "" "http://127.0.0.1:$EDGE_STATIC/1k.txt"
        fi
        run "nginx static 100 KiB" "$PID_nginx_static" 1 "" "http://127.0.0.1:$NGINX_STATIC/100k.txt"
        run "Slipway daemon static 100 KiB" "$DAEMON_PID" 0 "" "http://$ADDR/100k.txt" bench-static.localhost
        if [ -n "${EDGE_BIN:-}" ]; then
            run "edge_server static 100 KiB" "$PID_edge_static" 0 "" "http://127.0.0.1:$EDGE_STATIC/100k.txt"
        fi
    done
    echo "$MODE after: $(cat /proc/loadavg)" >>"$LOADS"
    stop_pass
done

echo
echo "machine: $(nproc) cores; load (1/5/15 min) before and after each pass:"
sed 's/^/  /' "$LOADS"
python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, rate, p99, cpu, backend, non2xx, socket, mode = line.rstrip("\n").split("\t")
    rows.setdefault(mode, {}).setdefault(label, []).append(
        (float(rate), float(p99), float(cpu), float(backend), int(non2xx), int(socket)))
for mode, labels in rows.items():
    median = {label: [statistics.median(c) for c in zip(*runs)] for label, runs in labels.items()}
    def reference(label):
        label = label.replace(" (metrics off)", "")
        for size in ("1 KiB", "100 KiB"):
            if label.endswith(f"static {size}"):
                return median.get(f"nginx static {size}")
        return median.get("nginx proxy (upstream keep-alive)")
    print(f"\nsandbox mode {mode} (medians over {len(next(iter(labels.values())))} rounds):\n")
    print("| target | req/s | p99 ms | proxy CPU µs/req | backend CPU µs/req | errors | req/s vs nginx | p99 vs nginx | CPU/req vs nginx |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, (rate, p99, cpu, backend, non2xx, socket) in median.items():
        ref = reference(label)
        name = f"**{label}**" if label.startswith("Slipway") else label
        backend_text = f"{backend:.1f}" if "static" not in label else "-"
        ratios = (f"{rate / ref[0]:.2f} | {p99 / ref[1]:.2f} | {cpu / ref[2]:.2f}" if ref
                  else "- | - | -")
        print(f"| {name} | {rate:.0f} | {p99:.2f} | {cpu:.1f} | {backend_text} | {non2xx + socket:.0f} "
              f"| {ratios} |")
    off = [(label, median[label]) for label in median if label.endswith(" (metrics off)")]
    if off:
        print(f"\nrequest metrics on vs off ({mode}):\n")
        print("| target | req/s on | req/s off | req/s on/off | CPU µs/req on | CPU µs/req off | CPU/req on/off |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, (rate_off, _, cpu_off, *_rest) in off:
            rate_on, _, cpu_on, *_ = median[label.replace(" (metrics off)", "")]
            print(f"| {label.replace(' (metrics off)', '')} | {rate_on:.0f} | {rate_off:.0f} | "
                  f"{rate_on / rate_off:.3f} | {cpu_on:.1f} | {cpu_off:.1f} | {cpu_on / cpu_off:.3f} |")
PY
