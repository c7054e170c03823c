#!/usr/bin/env bash
# Measures the real daemon's router (`slipway serve`, release build) next to nginx, HAProxy and
# Caddy proxying the same backend, and next to nginx serving the same static files, in one run;
# over plain HTTP/1.1, over TLS (HTTP/1.1 keep-alive) and over HTTP/2 (TLS + ALPN h2).
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
# /proc/<pid>/stat) with the ratios to nginx, and for proxies to HAProxy of the same protocol.
#
# TLS and h2 targets: a daemon with TLS on redirects plain HTTP, so each pass starts a second
# daemon with `[tls] mode = "files"` (a throw-away openssl CA and ECDSA P-256 leaf for
# bench-app/bench-static/slipway.localhost and localhost) and the same two projects; nginx
# (`listen ... ssl http2`) and HAProxy (`bind ... ssl alpn h2,http/1.1`) get the same
# certificate and proxy to THAT daemon's backend, so each TLS comparison shares one backend.
#   - "<server> TLS proxy", "<server> TLS static 1 KiB": wrk over https://127.0.0.1:PORT/
#     (wrk offers no ALPN, so HTTP/1.1 keep-alive), Host header as above;
#   - "<server> h2 proxy": `h2load -c64 -m10 -D <DURATION> --connect-to=127.0.0.1:PORT
#     https://bench-app.localhost:PORT/` (SNI and :authority name the app). h2load prints no
#     percentiles: the p99 column shows its mean time per request instead, marked "(mean)".
#
# Needs: wrk nginx haproxy caddy curl python3 (Debian packages) and cargo; openssl for the TLS
# and h2 targets, h2load (nghttp2-client) for the h2 ones, perf for PERF_STAT. A missing
# optional tool skips only its targets, with the reason printed.
#
#   benches/daemon_router.sh                    # both modes as root, 2 interleaved rounds
#   MODES=none ROUNDS=1 DURATION=5s benches/daemon_router.sh
#   SLIPWAY_BIN=target/release/slipway benches/daemon_router.sh   # skip the cargo build
#   TLS=0 benches/daemon_router.sh              # only the plain HTTP targets (no TLS daemon)
#   PERF_STAT=1 benches/daemon_router.sh
#       # counts syscalls and context switches of the proxy during each measured run
#       # (perf stat -e raw_syscalls:sys_enter,context-switches -p <pids>: nginx's workers, all
#       # threads of HAProxy, Caddy and the daemon) and adds them per request to the table
#   METRICS_OFF=1 MODES=none ROUNDS=2 DURATION=5s benches/daemon_router.sh
#       # adds a second daemon with `[metrics] requests = false` (same apps) and a table of
#       # req/s and CPU per request with request metrics on vs off
#   METRICS_OFF=1 METRICS_ONLY=1 MODES=none ROUNDS=6 DURATION=5s benches/daemon_router.sh
#       # only the two daemons (proxy and static 1 KiB), the order swapped every round
#   EDGE_BIN=target/release/deps/edge_server-<hash> benches/daemon_router.sh
#       # adds benches/edge_server.rs (bare Proxy::forward / StaticSite) on the same backend
#       # and files, to separate the daemon's own overhead from the proxy's
#   PROFILE=<dir> benches/daemon_router.sh      # perf record of the daemon per Slipway target
#
# wrk and h2load only ever target 127.0.0.1. The front proxies dial the backend the daemon
# reports: on 127.0.0.1 in mode `none`; in mode `namespaces` at the app's address inside the
# network namespace the daemon created for it (the script checks that it lies in the sandbox
# subnet it configured). Every process the script starts is stopped by pid; all files live in
# one temp dir.

# shellcheck disable=SC2154 # the PID_* variables are set by start(), through printf -v
set -euo pipefail

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-2}
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/benches/lib.sh"
if [ -z "${MODES:-}" ]; then
    if [ "$(id -u)" = 0 ]; then MODES="none namespaces"; else MODES="none"; fi
fi

for tool in wrk nginx haproxy caddy curl python3; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 0; }
done
# The optional targets: each missing tool skips only what needs it. METRICS_ONLY measures the
# plain daemons alone, so it needs no TLS daemon.
TLS_TARGETS=${TLS:-1}
[ "${METRICS_ONLY:-0}" = 1 ] && TLS_TARGETS=0
if [ "$TLS_TARGETS" = 1 ] && ! command -v openssl >/dev/null; then
    echo "SKIP the TLS and h2 targets: openssl is not installed (it makes their certificate)" >&2
    TLS_TARGETS=0
fi
H2_TARGETS=$TLS_TARGETS
if [ "$H2_TARGETS" = 1 ] && ! command -v h2load >/dev/null; then
    echo "SKIP the h2 targets: h2load is not installed (apt-get install nghttp2-client)" >&2
    H2_TARGETS=0
fi
PERF_STAT=${PERF_STAT:-0}
PERF_EVENTS=raw_syscalls:sys_enter,context-switches
if [ "$PERF_STAT" = 1 ]; then
    if ! command -v perf >/dev/null; then
        echo "PERF_STAT=1 ignored: perf is not installed" >&2
        PERF_STAT=0
    elif ! perf stat -e "$PERF_EVENTS" -x, -o /dev/null -- true 2>/dev/null; then
        echo "PERF_STAT=1 ignored: perf cannot count $PERF_EVENTS here (try as root)" >&2
        PERF_STAT=0
    fi
fi
H2_STREAMS=${H2_STREAMS:-10}

WORK=$(mktemp -d /tmp/slipway-daemon-bench.XXXXXX)
MARK=$(basename "$WORK")
PIDS=()            # every process started by this script, stopped by pid
DAEMON_PIDS=()     # the daemons of the current pass, stopped first, with SIGTERM
DAEMON_CONFIGS=()  # their configs, for `slipway stop-apps` once they are stopped
stop_pid() { # pid: SIGTERM, up to 10 s, then SIGKILL
    local pid=$1
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
# Apps outlive a daemon that stops (so that restarts and upgrades keep them up): after the
# daemons, `slipway stop-apps` stops the apps they left and removes what their sandbox holds on
# the host (loop-mounted volumes under the data dir, cgroups, links, the nftables table); then
# every other process, the apps' nginx masters included should one survive, by pid.
stop_pass() {
    local pid config
    for pid in "${DAEMON_PIDS[@]}"; do stop_pid "$pid"; done
    for config in "${DAEMON_CONFIGS[@]}"; do
        "$BIN" stop-apps --config "$config" >>"$(dirname "$config")/stop-apps.log" 2>&1 ||
            { echo "slipway stop-apps --config $config failed:" >&2; tail -5 "$(dirname "$config")/stop-apps.log" >&2; }
    done
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    DAEMON_PIDS=() DAEMON_CONFIGS=() PIDS=()
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

# The static files (also served by nginx) and the app's source (benches/lib.sh).
mkdir -p "$WORK/site"
python3 -c 'import sys, random, string
for name, size in (("1k.txt", 1024), ("100k.txt", 102400)):
    open(f"{sys.argv[1]}/{name}", "w").write("".join(random.choices(string.ascii_letters, k=size)))' "$WORK/site"
bench_nginx_app "$WORK/app.tgz"
tar czf "$WORK/site.tgz" -C "$WORK/site" .

# The operator's certificate for the TLS targets (benches/lib.sh): the daemon (files mode),
# nginx and HAProxy all serve the very same chain and key.
TLS_DIR="$WORK/tls"
if [ "$TLS_TARGETS" = 1 ]; then
    bench_certificate "$TLS_DIR" localhost bench-app.localhost bench-static.localhost slipway.localhost
fi

# nginx before 1.25.1 turns HTTP/2 on with `listen ... http2`, later ones with `http2 on;`.
nginx_tls_listen() { # port: the listen directive(s) of a TLS server block with HTTP/2 (ALPN)
    local version
    version=$(nginx -v 2>&1 | sed -n 's|.*nginx/\([0-9.]*\).*|\1|p')
    local ssl="ssl_certificate $TLS_DIR/chain.pem; ssl_certificate_key $TLS_DIR/key.pem; ssl_protocols TLSv1.2 TLSv1.3;"
    if printf '%s\n' 1.25.1 "$version" | sort -V -C; then
        echo "listen 127.0.0.1:$1 ssl; http2 on; $ssl"
    else
        echo "listen 127.0.0.1:$1 ssl http2; $ssl"
    fi
}

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

wait_http() { # url [pid [log]]: up to 30 s for any HTTP(S) answer; fails at once if pid exits
    for _ in $(seq 1 300); do
        curl -sk -o /dev/null --max-time 2 "$1" && return 0
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

# The pids perf stat attaches to: nginx's workers (the children of the master, which serves
# no requests), otherwise the process itself, all of whose threads perf follows.
perf_pids() { # pid, with_children (0|1) → comma-separated pids
    if [ "$2" = 1 ]; then
        ps --ppid "$1" -o pid= | tr -s ' \n' ',' | sed 's/^,//; s/,$//'
    else
        echo "$1"
    fi
}

# One measured load run, with the proxy's CPU ticks read before and after it, perf record
# around it for PROFILE and perf stat around it for PERF_STAT (perf stat runs the load tool
# itself: its counters are on before the tool starts and stop when it exits; perf takes about
# a second to set up the tracepoint, which a perf started beside the tool would miss). Appends "label rate latency latency_kind cpu backend_cpu non2xx socket_errors mode
# syscalls cs" (the last two per request, "-" without PERF_STAT) to RESULTS.
measure() { # label, pid, with_children, backend pid or "", wrk|h2load, command...
    local label=$1 pid=$2 children=$3 backend=$4 tool=$5
    shift 5
    local before after backend_before=0 backend_after=0 perf_out=""
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
    if [ "$PERF_STAT" = 1 ]; then
        perf_out="$WORK/perf_stat.out"
        perf stat -e "$PERF_EVENTS" -x, -o "$perf_out" -p "$(perf_pids "$pid" "$children")" \
            -- "$@" >"$WORK/load.out"
    else
        "$@" >"$WORK/load.out"
    fi
    if [ -n "$perf_pid" ]; then kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; fi
    after=$(cpu_ticks "$pid" "$children")
    [ -n "$backend" ] && backend_after=$(cpu_ticks "$backend" 1)
    python3 - "$label" "$((after - before))" "$((backend_after - backend_before))" "$TICKS" \
        "$MODE" "$tool" "$WORK/load.out" "$perf_out" >>"$RESULTS" <<'PY'
import re, sys
label, ticks, backend_ticks, per_second, mode, tool, path, perf_path = sys.argv[1:9]
text = open(path).read()
def milliseconds(value, unit):
    return float(value) * {"us": 0.001, "ms": 1, "s": 1000}[unit]
if tool == "wrk":
    requests = int(re.search(r"(\d+) requests in", text).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    latency, kind = milliseconds(*re.search(r"99%\s+([\d.]+)(us|ms|s)", text).groups()), "p99"
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    non2xx = int(non2xx.group(1)) if non2xx else 0
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    failed = sum(map(int, socket.groups())) if socket else 0
else:  # h2load
    protocol = re.search(r"Application protocol: (\S+)", text)
    if not protocol or protocol.group(1) != "h2":
        sys.exit(f"{label}: h2load did not negotiate h2:\n{text}")
    rate = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", text).group(1))
    counts = re.search(r"requests: \d+ total, \d+ started, (\d+) done, \d+ succeeded, (\d+) failed", text)
    requests, failed = int(counts.group(1)), int(counts.group(2))  # failed includes errored, timeout
    codes = re.search(r"status codes: \d+ 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    non2xx = sum(map(int, codes.groups()))
    # No percentiles in h2load's output: its mean time per request, marked as such.
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)", text)
    latency, kind = milliseconds(*mean.groups()), "mean"
perf = {}
if perf_path:
    for line in open(perf_path):
        fields = line.strip().split(",")
        if len(fields) > 2 and not line.startswith("#"):
            # "<not counted>": the process never ran while counted.
            perf[fields[2]] = 0.0 if fields[0] == "<not counted>" else float(fields[0])
def per_request_count(event):
    return f"{perf[event] / max(requests, 1):.2f}" if event in perf else "-"
def per_request(t):
    return int(t) / int(per_second) * 1e6 / max(requests, 1)
print("\t".join([label, f"{rate:.0f}", f"{latency:.2f}", kind, f"{per_request(ticks):.1f}",
                 f"{per_request(backend_ticks):.1f}", str(non2xx), str(failed), mode,
                 per_request_count("raw_syscalls:sys_enter"), per_request_count("context-switches")]))
PY
    tail -n1 "$RESULTS" >&2
}

# One wrk run (plain or TLS HTTP/1.1 keep-alive) after a 1 s warm-up (pools, caches).
run() { # label, pid, with_children, backend pid or "", url, [host header]
    local label=$1 pid=$2 children=$3 backend=$4 url=$5 host=${6:-}
    local header=()
    [ -n "$host" ] && header=(-H "Host: $host")
    wrk -t1 -c16 -d1s "${header[@]}" "$url" >/dev/null
    measure "$label" "$pid" "$children" "$backend" wrk \
        wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "${header[@]}" "$url"
}

# One h2load run (HTTP/2 over TLS) after a 1 s warm-up. h2load connects to 127.0.0.1 but
# names `host` in SNI and :authority, as a browser would.
run_h2() { # label, pid, with_children, backend pid, port, host, path
    local label=$1 pid=$2 children=$3 backend=$4 port=$5 host=$6 path=$7
    local url="https://$host:$port$path" connect="--connect-to=127.0.0.1:$port"
    h2load -c16 -m"$H2_STREAMS" -D 1 "$connect" "$url" >/dev/null
    measure "$label" "$pid" "$children" "$backend" h2load \
        h2load -t"$THREADS" -c"$CONNECTIONS" -m"$H2_STREAMS" -D "$DURATION" "$connect" "$url"
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
# instance, TLS off or in files mode with the bench certificate) and deploys bench-app and
# bench-static on it; sets ADDR (plain HTTP), HTTPS_ADDR (empty with TLS off), TOKEN, BACKEND,
# UP_PID and UP_BACKEND_PID. With TLS on the daemon redirects plain HTTP to HTTPS, except the
# API from loopback, which is how this function deploys.
daemon_up() { # dir, true|false, sandbox instance, off|files
    local D=$1 REQUESTS=$2 INSTANCE=$3 TLS_MODE=$4
    mkdir -p "$D"
    SUBNET_A=$((220 + RANDOM % 30)); SUBNET_B=$((RANDOM % 256))
    local tls_files=""
    [ "$TLS_MODE" = files ] && tls_files="cert_file = \"$TLS_DIR/chain.pem\"
key_file = \"$TLS_DIR/key.pem\""
    cat >"$D/slipway.toml" <<TOML
data_dir = "$D/data"
apps_domain = "localhost"
http_listen = "127.0.0.1:0"
https_listen = "127.0.0.1:0"
[tls]
mode = "$TLS_MODE"
$tls_files
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
    DAEMON_CONFIGS+=("$D/slipway.toml")
    "$BIN" serve --config "$D/slipway.toml" >"$D/daemon.out" 2>"$D/daemon.log" &
    UP_PID=$!
    DAEMON_PIDS+=("$UP_PID")
    for _ in $(seq 1 150); do grep -q '^ready' "$D/daemon.out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^ready' "$D/daemon.out" || { echo "the daemon did not start:" >&2; tail -20 "$D/daemon.log" >&2; exit 1; }
    ADDR=$(sed -n 's/^listening http //p' "$D/daemon.out")
    case "$ADDR" in 127.0.0.1:*) ;; *) echo "unexpected daemon address $ADDR" >&2; exit 1 ;; esac
    HTTPS_ADDR=""
    if [ "$TLS_MODE" != off ]; then
        HTTPS_ADDR=$(sed -n 's/^listening https //p' "$D/daemon.out")
        case "$HTTPS_ADDR" in 127.0.0.1:*) ;; *) echo "unexpected daemon HTTPS address '$HTTPS_ADDR'" >&2; exit 1 ;; esac
    fi
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
    APP_BODY=$(python3 -c 'import json, sys; print(json.dumps({"projectSlug": "bench-app", "startCommand": sys.argv[1]}))' "$BENCH_APP_START")
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
    PIDS+=("$UP_BACKEND_PID") # should stop-apps leave it behind
}

RESULTS="$WORK/results.tsv"
LOADS="$WORK/loads.txt"
: >"$RESULTS"
: >"$LOADS"
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, loopback, $(nproc) cores, $ROUNDS rounds, modes: $MODES" >&2

# nginx's proxy location, the same for the plain and the TLS front (upstream `app`).
NGINX_PROXY_LOCATION="location / { proxy_pass http://app; proxy_http_version 1.1;
        proxy_set_header Connection \"\"; proxy_set_header Host \$host;
        proxy_set_header X-Forwarded-For \$remote_addr; proxy_set_header X-Forwarded-Proto \$scheme; }"

# The TLS fronts of a pass, all with the bench certificate and HTTP/2 offered by ALPN (as the
# daemon does): nginx and HAProxy in front of the TLS daemon's backend ($TLS_BACKEND) and nginx
# serving the static files. Sets their ports and pids.
start_tls_fronts() {
    read -r NGINX_TLS_PROXY HAPROXY_TLS NGINX_TLS_STATIC <<<"$(free_ports 3)"
    nginx_conf "$P/nginx_tls_proxy" "upstream app { server $TLS_BACKEND; keepalive 64; }
    server { $(nginx_tls_listen "$NGINX_TLS_PROXY")
        $NGINX_PROXY_LOCATION }"
    nginx_conf "$P/nginx_tls_static" "sendfile on; tcp_nopush on; open_file_cache max=100;
    server { $(nginx_tls_listen "$NGINX_TLS_STATIC") root $WORK/site; }"
    bench_haproxy_cfg "$P/haproxy_tls.cfg" \
        "127.0.0.1:$HAPROXY_TLS ssl crt $TLS_DIR/haproxy.pem alpn h2,http/1.1" "$TLS_BACKEND"
    start PID_nginx_tls_proxy "$P/nginx_tls_proxy.out" nginx -c "$P/nginx_tls_proxy/nginx.conf" -g 'daemon off;'
    start PID_nginx_tls_static "$P/nginx_tls_static.out" nginx -c "$P/nginx_tls_static/nginx.conf" -g 'daemon off;'
    start PID_haproxy_tls "$P/haproxy_tls.out" haproxy -db -f "$P/haproxy_tls.cfg"
    wait_http "https://127.0.0.1:$NGINX_TLS_PROXY/" "$PID_nginx_tls_proxy" "$P/nginx_tls_proxy.out"
    wait_http "https://127.0.0.1:$NGINX_TLS_STATIC/" "$PID_nginx_tls_static" "$P/nginx_tls_static.out"
    wait_http "https://127.0.0.1:$HAPROXY_TLS/" "$PID_haproxy_tls" "$P/haproxy_tls.out"
}

# Checks a TLS target as a client that trusts only the bench CA would: the chain verifies for
# HOST, the protocol is the one asked for (ALPN), and the body has the expected size.
check_tls() { # label, expected size, port, host, path, 1.1|2
    local answer
    answer=$(curl -sf --max-time 5 --cacert "$TLS_DIR/ca.pem" --resolve "$4:$3:127.0.0.1" \
        "--http$6" -o /dev/null -w '%{size_download} %{http_version}' "https://$4:$3$5") || {
        echo "$1: HTTPS request to $4:$3$5 failed" >&2; return 1; }
    [ "$answer" = "$2 $6" ] || { echo "$1: got '$answer' (size, HTTP version), expected '$2 $6'" >&2; return 1; }
}

check_tls_targets() {
    local port
    for port in "$NGINX_TLS_PROXY" "$HAPROXY_TLS" "$TLS_PORT"; do
        check_tls "TLS proxy" 23 "$port" bench-app.localhost / 1.1
        if [ "$H2_TARGETS" = 1 ]; then check_tls "h2 proxy" 23 "$port" bench-app.localhost / 2; fi
    done
    check_tls "nginx TLS static" 1024 "$NGINX_TLS_STATIC" bench-static.localhost /1k.txt 1.1
    check_tls "daemon TLS static" 1024 "$TLS_PORT" bench-static.localhost /1k.txt 1.1
    # The daemon with TLS on sends plain HTTP visitors to HTTPS: the reason it is a daemon of
    # its own.
    local status
    status=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' -H "Host: bench-app.localhost" "http://$TLS_HTTP_ADDR/")
    case "$status" in 30[1278]) ;; *) echo "TLS daemon: plain HTTP answered $status, not a redirect" >&2; return 1 ;; esac
}

pass=0
for MODE in $MODES; do
    pass=$((pass + 1))
    P="$WORK/$MODE"
    mkdir -p "$P"
    daemon_up "$P" true slwbench off
    DAEMON_PID=$UP_PID BACKEND_PID=$UP_BACKEND_PID
    MAIN_ADDR=$ADDR MAIN_BACKEND=$BACKEND
    if [ "${METRICS_OFF:-0}" = 1 ]; then
        # The same daemon with request metrics off, to measure what counting costs.
        daemon_up "$P/metrics-off" false slwbenchoff off
        OFF_ADDR=$ADDR OFF_PID=$UP_PID OFF_BACKEND_PID=$UP_BACKEND_PID
        echo "metrics off: daemon pid $UP_PID at $OFF_ADDR, backend $BACKEND" >&2
    fi
    if [ "$TLS_TARGETS" = 1 ]; then
        # The same daemon with TLS on (files mode), for the TLS and h2 targets.
        daemon_up "$P/tls" true slwbenchtls files
        TLS_HTTP_ADDR=$ADDR TLS_PORT=${HTTPS_ADDR##*:} TLS_PID=$UP_PID
        TLS_BACKEND=$BACKEND TLS_BACKEND_PID=$UP_BACKEND_PID
        echo "TLS: daemon pid $TLS_PID at $HTTPS_ADDR, backend $TLS_BACKEND (nginx pid $TLS_BACKEND_PID)" >&2
    fi
    ADDR=$MAIN_ADDR BACKEND=$MAIN_BACKEND
    echo "pass $pass: sandbox $MODE, daemon pid $DAEMON_PID at $ADDR, backend $BACKEND (nginx pid $BACKEND_PID)" >&2

    # The front proxies and nginx static, on loopback ports of their own.
    read -r NGINX_PROXY HAPROXY CADDY NGINX_STATIC EDGE_PROXY EDGE_STATIC <<<"$(free_ports 6)"
    nginx_conf "$P/nginx_proxy" "upstream app { server $BACKEND; keepalive 64; }
    server { listen 127.0.0.1:$NGINX_PROXY; $NGINX_PROXY_LOCATION }"
    nginx_conf "$P/nginx_static" "sendfile on; tcp_nopush on; open_file_cache max=100;
    server { listen 127.0.0.1:$NGINX_STATIC; root $WORK/site; }"
    bench_haproxy_cfg "$P/haproxy.cfg" "127.0.0.1:$HAPROXY" "$BACKEND"
    cat >"$P/Caddyfile" <<EOF2
{
    admin off
    auto_https off
}
http://127.0.0.1:$CADDY {
    reverse_proxy $BACKEND
}
EOF2
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
    if [ "$TLS_TARGETS" = 1 ]; then start_tls_fronts; fi
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
    if [ "$TLS_TARGETS" = 1 ]; then check_tls_targets; fi

    echo "$MODE before: $(cat /proc/loadavg)" >>"$LOADS"
    for round in $(seq 1 "$ROUNDS"); do
        echo "round $round/$ROUNDS, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        if [ "${METRICS_ONLY:-0}" = 1 ]; then
            # Only the daemon with request metrics on and off, the order swapped every round
            # so that drifting load favours neither.
            on_proxy() { run "Slipway daemon proxy" "$DAEMON_PID" 0 "$BACKEND_PID" "http://$ADDR/" bench-app.localhost; }
            off_proxy() { run "Slipway daemon proxy (metrics off)" "$OFF_PID" 0 "$OFF_BACKEND_PID" "http://$OFF_ADDR/" bench-app.localhost; }
            on_static() { run "Slipway daemon static 1 KiB" "$DAEMON_PID" 0 "" "http://$ADDR/1k.txt" bench-static.localhost; }
            off_static() { run "Slipway daemon static 1 KiB (metrics off)" "$OFF_PID" 0 "" "http://$OFF_ADDR/1k.txt" bench-static.localhost; }
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
            run "Slipway daemon proxy (metrics off)" "$OFF_PID" 0 "$OFF_BACKEND_PID" "http://$OFF_ADDR/" bench-app.localhost
        fi
        if [ -n "${EDGE_BIN:-}" ]; then
            run "edge_server proxy (bare Proxy::forward)" "$PID_edge_proxy" 0 "$BACKEND_PID" "http://127.0.0.1:$EDGE_PROXY/"
        fi
        if [ "$TLS_TARGETS" = 1 ]; then
            # HTTPS with HTTP/1.1 keep-alive; all three in front of the TLS daemon's backend.
            run "nginx TLS proxy" "$PID_nginx_tls_proxy" 1 "$TLS_BACKEND_PID" "https://127.0.0.1:$NGINX_TLS_PROXY/"
            run "HAProxy TLS proxy" "$PID_haproxy_tls" 0 "$TLS_BACKEND_PID" "https://127.0.0.1:$HAPROXY_TLS/"
            run "Slipway TLS proxy" "$TLS_PID" 0 "$TLS_BACKEND_PID" "https://127.0.0.1:$TLS_PORT/" bench-app.localhost
        fi
        if [ "$H2_TARGETS" = 1 ]; then
            run_h2 "nginx h2 proxy" "$PID_nginx_tls_proxy" 1 "$TLS_BACKEND_PID" "$NGINX_TLS_PROXY" bench-app.localhost /
            run_h2 "HAProxy h2 proxy" "$PID_haproxy_tls" 0 "$TLS_BACKEND_PID" "$HAPROXY_TLS" bench-app.localhost /
            run_h2 "Slipway h2 proxy" "$TLS_PID" 0 "$TLS_BACKEND_PID" "$TLS_PORT" bench-app.localhost /
        fi
        run "nginx static 1 KiB" "$PID_nginx_static" 1 "" "http://127.0.0.1:$NGINX_STATIC/1k.txt"
        run "Slipway daemon static 1 KiB" "$DAEMON_PID" 0 "" "http://$ADDR/1k.txt" bench-static.localhost
        if [ "${METRICS_OFF:-0}" = 1 ]; then
            run "Slipway daemon static 1 KiB (metrics off)" "$OFF_PID" 0 "" "http://$OFF_ADDR/1k.txt" bench-static.localhost
        fi
        if [ -n "${EDGE_BIN:-}" ]; then
            run "edge_server static 1 KiB" "$PID_edge_static" 0 "" "http://127.0.0.1:$EDGE_STATIC/1k.txt"
        fi
        if [ "$TLS_TARGETS" = 1 ]; then
            run "nginx TLS static 1 KiB" "$PID_nginx_tls_static" 1 "" "https://127.0.0.1:$NGINX_TLS_STATIC/1k.txt"
            run "Slipway TLS static 1 KiB" "$TLS_PID" 0 "" "https://127.0.0.1:$TLS_PORT/1k.txt" bench-static.localhost
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
python3 - "$RESULTS" "$PERF_STAT" <<'PY'
import statistics, sys
results, perf_stat = sys.argv[1], sys.argv[2] == "1"
rows, kinds = {}, {}
for line in open(results):
    (label, rate, latency, kind, cpu, backend, non2xx, failed, mode,
     syscalls, switches) = line.rstrip("\n").split("\t")
    kinds[label] = kind
    rows.setdefault(mode, {}).setdefault(label, []).append(
        (float(rate), float(latency), float(cpu), float(backend), int(non2xx), int(failed),
         float("nan") if syscalls == "-" else float(syscalls),
         float("nan") if switches == "-" else float(switches)))

def references(label):
    """The nginx row a row is compared with, and for proxies the HAProxy row of the same
    protocol (plain HTTP/1.1, TLS HTTP/1.1 or h2)."""
    label = label.replace(" (metrics off)", "")
    tls = " TLS " in label
    for size in ("1 KiB", "100 KiB"):
        if label.endswith(f"static {size}"):
            return (f"nginx TLS static {size}" if tls else f"nginx static {size}"), None
    if " h2 " in label:
        return "nginx h2 proxy", "HAProxy h2 proxy"
    if tls:
        return "nginx TLS proxy", "HAProxy TLS proxy"
    return "nginx proxy (upstream keep-alive)", "HAProxy proxy"

def ratio(value, reference):
    return f"{value / reference:.2f}" if reference else "-"

for mode, labels in rows.items():
    median = {label: [statistics.median(c) for c in zip(*runs)] for label, runs in labels.items()}
    print(f"\nsandbox mode {mode} (medians over {len(next(iter(labels.values())))} rounds):\n")
    perf_head = " syscalls/req | ctx switches/req |" if perf_stat else ""
    print("| target | req/s | p99 ms | proxy CPU µs/req | backend CPU µs/req | errors | req/s vs nginx "
          f"| req/s vs HAProxy | p99 vs nginx | CPU/req vs nginx |{perf_head}")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if perf_stat else ""))
    for label, (rate, latency, cpu, backend, non2xx, failed, syscalls, switches) in median.items():
        nginx_label, haproxy_label = references(label)
        nginx, haproxy = median.get(nginx_label), median.get(haproxy_label)
        name = f"**{label}**" if label.startswith("Slipway") else label
        latency_text = f"{latency:.2f}" + (" (mean)" if kinds[label] == "mean" else "")
        backend_text = f"{backend:.1f}" if "static" not in label else "-"
        perf_text = f" {syscalls:.1f} | {switches:.2f} |" if perf_stat else ""
        print(f"| {name} | {rate:.0f} | {latency_text} | {cpu:.1f} | {backend_text} | {non2xx + failed:.0f} "
              f"| {ratio(rate, nginx and nginx[0])} | {ratio(rate, haproxy and haproxy[0])} "
              f"| {ratio(latency, nginx and nginx[1])} | {ratio(cpu, nginx and nginx[2])} |{perf_text}")
    if any(kinds[label] == "mean" for label in median):
        print("\n(mean): h2load prints no percentiles; these rows show its mean time per request, "
              "and their p99 ratio compares means.")
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
