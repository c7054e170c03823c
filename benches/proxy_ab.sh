#!/usr/bin/env bash
# A/B of daemon binaries on the proxy path, with what each process pays per request.
#
# Each binary given gets a daemon of its own (sandbox none, TLS off) with one server-mode app:
# nginx answering a 23-byte body, the same app as benches/daemon_router.sh. HAProxy (2
# threads, `http-reuse always`) proxies to the first daemon's app. Each round runs wrk -t1
# -c64 (after a 1 s warm-up) against every daemon, then HAProxy; the table gives medians over
# the rounds of:
#   req/s, and req/s over HAProxy's in the same round;
#   the proxy's user and system CPU µs per request (utime/stime of all its threads);
#   the app's CPU µs per request (its nginx workers) and the context switches per request of
#   the proxy, the app and wrk (voluntary + involuntary); wrk's p99 latency (nan for H2=1).
# Meant for quick same-machine comparisons of a change (benches/README.md, issue 17); the
# full comparison with nginx, Caddy, TLS and HTTP/2 is daemon_router.sh.
#
#   bash benches/proxy_ab.sh /tmp/slipway-before target/release/slipway
#   ROUNDS=6 DURATION=2s bash benches/proxy_ab.sh target/release/slipway
#   H2=1 bash benches/proxy_ab.sh /tmp/slipway-before target/release/slipway
#       # HTTP/2 over TLS instead: the daemons in tls files mode and HAProxy (`ssl alpn
#       # h2,http/1.1`) with one bench certificate (benches/lib.sh), the load from `h2load -c64
#       # -m10` naming bench-app.localhost (SNI, :authority); the "wrk" column is h2load's
#
# Needs wrk, nginx, haproxy, curl, python3 and GNU time (/usr/bin/time); openssl and h2load
# (nghttp2-client) for H2=1. Loopback only; every
# process it starts is stopped, the apps by `slipway stop-apps`.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-2s}
H2=${H2:-0}
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/benches/lib.sh"
[ $# -ge 1 ] || { echo "usage: $0 SLIPWAY_BINARY..." >&2; exit 2; }
for tool in wrk nginx haproxy curl python3 /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 0; }
done
if [ "$H2" = 1 ]; then
    for tool in openssl h2load; do
        command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (H2=1)" >&2; exit 0; }
    done
fi

WORK=$(mktemp -d /tmp/slipway-proxy-ab.XXXXXX)
HAPROXY_PID=""
BINS=()
cleanup() {
    [ -n "$HAPROXY_PID" ] && kill "$HAPROXY_PID" 2>/dev/null
    bench_stop_daemons
    local i
    for i in "${!BINS[@]}"; do
        "${BINS[$i]}" stop-apps --config "$WORK/d$i/slipway.toml" >/dev/null 2>&1 || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

bench_nginx_app "$WORK/app.tgz"
if [ "$H2" = 1 ]; then
    bench_certificate "$WORK/tls" localhost bench-app.localhost slipway.localhost
    BENCH_TLS="mode = \"files\"
cert_file = \"$WORK/tls/chain.pem\"
key_file = \"$WORK/tls/key.pem\""
fi

ADDRS=() PIDS=() APPS=()
for i in $(seq 0 $(($# - 1))); do
    arg=$1; shift
    BIN=$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")
    BINS+=("$BIN")
    bench_daemon "$WORK/d$i"
    api() { # method, path, curl arguments...
        local method=$1 path=$2; shift 2
        curl -sS --fail-with-body -X "$method" -H "Authorization: Bearer $DAEMON_TOKEN" \
            -H "Host: slipway.localhost" "$@" "http://$DAEMON_ADDR/api$path"
    }
    json() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }
    api POST /projects -H 'Content-Type: application/json' -d '{"slug":"bench-app"}' >/dev/null
    api POST /projects/bench-app/env-vars -H 'Content-Type: application/json' \
        -d "{\"BENCH_TMP\":\"$WORK/d$i/app-tmp\",\"BENCH_HOST\":\"127.0.0.1\"}" >/dev/null
    api POST /projects/bench-app/source -H 'Content-Type: application/gzip' --data-binary @"$WORK/app.tgz" >/dev/null
    body=$(python3 -c 'import json, sys; print(json.dumps({"projectSlug": "bench-app", "startCommand": sys.argv[1]}))' "$BENCH_APP_START")
    id=$(api POST /projects/bench-app/provision -H 'Content-Type: application/json' -d "$body" | json '["provisioningId"]')
    for _ in $(seq 240); do
        status=$(api GET "/provisioning/$id/status")
        [ "$(json '["status"]' <<<"$status")" = provisioning_in_progress ] || break
        sleep 0.25
    done
    [ "$(json '["status"]' <<<"$status")" = provisioning_complete ] || { echo "deploy failed: $status" >&2; exit 1; }
    deployment=$(json '["deploymentId"]' <<<"$status")
    app=$(api GET "/deployments/$deployment/logs?stream=system" | python3 -c '
import json, re, sys
for line in json.load(sys.stdin)["logs"]:
    m = re.search(r"app is accepting connections on port \d+ \((.+)\)", line["message"])
    if m:
        print(m.group(1))')
    case "$app" in 127.0.0.1:*) ;; *) echo "refusing app address '$app'" >&2; exit 1 ;; esac
    front=$DAEMON_ADDR
    [ "$H2" = 1 ] && front=$DAEMON_HTTPS_ADDR
    ADDRS+=("$front") PIDS+=("$DAEMON_PID") APPS+=("$app")
    echo "bin$i: $BIN, pid $DAEMON_PID at $front, app $app" >&2
done

HAPROXY_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SCHEME=http HAPROXY_BIND="127.0.0.1:$HAPROXY_PORT"
if [ "$H2" = 1 ]; then
    SCHEME=https HAPROXY_BIND="$HAPROXY_BIND ssl crt $WORK/tls/haproxy.pem alpn h2,http/1.1"
fi
bench_haproxy_cfg "$WORK/haproxy.cfg" "$HAPROXY_BIND" "${APPS[0]}"
haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.out" 2>&1 &
HAPROXY_PID=$!
for _ in $(seq 50); do curl -sk -o /dev/null "$SCHEME://127.0.0.1:$HAPROXY_PORT/" && break; sleep 0.1; done

# The nginx workers serving the app of daemon d$1 (their master's command line names its dir).
app_workers() {
    local pid parent
    for pid in $(pgrep -f "nginx: worker"); do
        parent=$(ps -o ppid= -p "$pid" | tr -d ' ')
        grep -q "$WORK/d$1/" "/proc/$parent/cmdline" 2>/dev/null && echo "$pid"
    done
}
# "utime stime context-switches" summed over the given pids' threads.
usage() {
    local pid task u s c total_u=0 total_s=0 total_c=0
    for pid in "$@"; do
        read -r u s < <(awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$pid/stat")
        total_u=$((total_u + u)) total_s=$((total_s + s))
        for task in /proc/"$pid"/task/*/status; do
            c=$(awk '/ctxt_switches/ { n += $2 } END { print n }' "$task")
            total_c=$((total_c + c))
        done
    done
    echo "$total_u $total_s $total_c"
}

RESULTS="$WORK/results"
: >"$RESULTS"
# The load: wrk over plain HTTP/1.1 with the Host header, or h2load over TLS naming the host
# in SNI and :authority. Every output line is prefixed so that measure's parser sees one form.
load() { # duration, connections, address, host
    if [ "$H2" = 1 ]; then
        h2load -c"$2" -m10 -D "${1%s}" --connect-to="$3" "https://$4:${3##*:}/" |
            sed -n -e 's/.*finished in [0-9.]*[a-z]*, \([0-9.]*\) req\/s.*/Requests\/sec: \1/p' \
                -e 's/^requests: [0-9]* total, [0-9]* started, \([0-9]*\) done.*/\1 requests in/p'
    else
        wrk -t1 -c"$2" -d"$1" --latency -H "Host: $4" "http://$3/"
    fi
}
measure() { # label, proxy pid, app's daemon index, address, host
    local label=$1 pid=$2 d=$3 addr=$4 host=$5 workers before app_before after app_after out
    mapfile -t workers < <(app_workers "$d")
    load 1s 16 "$addr" "$host" >/dev/null
    before=$(usage "$pid") app_before=$(usage "${workers[@]}")
    out=$( { /usr/bin/time -f "WRK %U %S %w %c" bash -c "$(declare -f load); H2=$H2 load $DURATION 64 $addr $host"; } 2>&1)
    after=$(usage "$pid") app_after=$(usage "${workers[@]}")
    python3 - "$label" "$before" "$after" "$app_before" "$app_after" "$(getconf CLK_TCK)" "$out" >>"$RESULTS" <<'PY'
import re, sys
label, before, after, app_before, app_after, hz, out = sys.argv[1:8]
delta = lambda a, b: [int(y) - int(x) for x, y in zip(a.split(), b.split())]
u, s, c = delta(before, after)
au, as_, ac = delta(app_before, app_after)
n = int(re.search(r"(\d+) requests in", out).group(1))
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
wu, ws, wv, wi = re.search(r"WRK ([\d.]+) ([\d.]+) (\d+) (\d+)", out).groups()
us = lambda ticks: ticks / int(hz) * 1e6 / n
p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
p99 = float(p99.group(1)) * {"us": 1e-3, "ms": 1, "s": 1e3}[p99.group(2)] if p99 else float("nan")
print(label, rate, us(u), us(s), us(au + as_), c / n, ac / n, (int(wv) + int(wi)) / n, p99)
PY
    tail -n1 "$RESULTS" >&2
}

for round in $(seq "$ROUNDS"); do
    echo "round $round/$ROUNDS, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    for i in "${!ADDRS[@]}"; do
        measure "bin$i" "${PIDS[$i]}" "$i" "${ADDRS[$i]}" bench-app.localhost
    done
    measure haproxy "$HAPROXY_PID" 0 "127.0.0.1:$HAPROXY_PORT" bench-app.localhost
done

python3 - "$RESULTS" "$ROUNDS" "$DURATION" "$H2" <<'PY'
import collections, statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
by = collections.defaultdict(list)
ratio = collections.defaultdict(list)
round_rows = []
for row in rows:
    label, values = row[0], [float(v) for v in row[1:]]
    by[label].append(values)
    if label == "haproxy":
        for other, rate in round_rows:
            ratio[other].append(rate / values[0])
        round_rows = []
    else:
        round_rows.append((label, values[0]))
tool = "h2load -c64 -m10 (TLS, h2)" if sys.argv[4] == "1" else "wrk -t1 -c64"
print(f"\n{tool} -d{sys.argv[3]}, medians of {sys.argv[2]} rounds\n")
print("| target | req/s | vs HAProxy | proxy user µs/req | proxy sys µs/req | app CPU µs/req | ctx sw/req proxy | app | wrk | p99 ms |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for label, values in by.items():
    med = [statistics.median(v[i] for v in values) for i in range(8)]
    vs = f"{statistics.median(ratio[label]):.3f}" if label in ratio else "1.000"
    print(f"| {label} | {med[0]:.0f} | {vs} | {med[1]:.2f} | {med[2]:.2f} | {med[3]:.2f} | "
          f"{med[4]:.3f} | {med[5]:.3f} | {med[6]:.3f} | {med[7]:.2f} |")
PY
