#!/usr/bin/env bash
# Compares Slipway's proxy and static serving with nginx, HAProxy and Caddy on loopback, in
# one run, against the same backend (an nginx answering a short body). Prints req/s, p99
# latency and the server's CPU time per request (from /proc), and the ratios to nginx.
#
# Needs: wrk nginx haproxy caddy (Debian packages) and cargo. Loopback only; every process it
# starts is stopped by pid on exit.
#
#   benches/router.sh                  # wrk -t1 -c64 -d10s per target, 2 interleaved rounds
#   DURATION=5s CONNECTIONS=32 ROUNDS=1 benches/router.sh
#
# The table shows the median over the rounds; figures move 20-40 % between runs on a shared
# machine, so compare only the ratios of one run.
set -euo pipefail

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-2}
BASE=${BASE:-$((20000 + RANDOM % 20000))}
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/benches/lib.sh"

for tool in wrk nginx haproxy caddy cargo python3; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 0; }
done

WORK=$(mktemp -d /tmp/slipway-bench.XXXXXX)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

BACKEND=$BASE; NGINX_PROXY=$((BASE + 1)); HAPROXY=$((BASE + 2)); CADDY=$((BASE + 3))
SLIPWAY_PROXY=$((BASE + 4)); NGINX_STATIC=$((BASE + 5)); SLIPWAY_STATIC=$((BASE + 6))

echo "building the bench server (release)..." >&2
EDGE=$(cd "$REPO" && cargo bench --bench edge_server --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "edge_server" and m.get("executable"):
        print(m["executable"])')

mkdir -p "$WORK/site"
python3 -c 'import sys, random, string
for name, size in (("1k.txt", 1024), ("100k.txt", 102400)):
    open(f"{sys.argv[1]}/{name}", "w").write("".join(random.choices(string.ascii_letters, k=size)))' "$WORK/site"

nginx_conf() { # name, server block
    mkdir -p "$WORK/$1"
    cat >"$WORK/$1/nginx.conf" <<EOF
user root;
worker_processes 2;
pid $WORK/$1/nginx.pid;
error_log $WORK/$1/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/$1; proxy_temp_path $WORK/$1; fastcgi_temp_path $WORK/$1;
    uwsgi_temp_path $WORK/$1; scgi_temp_path $WORK/$1;
    keepalive_requests 1000000;
    include /etc/nginx/mime.types;
    $2
}
EOF
}

nginx_conf backend "server { listen 127.0.0.1:$BACKEND; location / { return 200 'hello from the backend\n'; } }"
nginx_conf nginx_proxy "upstream app { server 127.0.0.1:$BACKEND; keepalive 64; }
    server { listen 127.0.0.1:$NGINX_PROXY; location / { proxy_pass http://app; proxy_http_version 1.1;
        proxy_set_header Connection \"\"; proxy_set_header Host \$host;
        proxy_set_header X-Forwarded-For \$remote_addr; proxy_set_header X-Forwarded-Proto \$scheme; } }"
nginx_conf nginx_static "sendfile on; tcp_nopush on; open_file_cache max=100;
    server { listen 127.0.0.1:$NGINX_STATIC; root $WORK/site; }"

bench_haproxy_cfg "$WORK/haproxy.cfg" "127.0.0.1:$HAPROXY" "127.0.0.1:$BACKEND"

cat >"$WORK/Caddyfile" <<EOF
{
    admin off
    auto_https off
}
http://127.0.0.1:$CADDY {
    reverse_proxy 127.0.0.1:$BACKEND
}
EOF

start() { # name, command...
    local name=$1; shift
    "$@" >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    eval "PID_$name=$!"
}

start backend nginx -c "$WORK/backend/nginx.conf" -g 'daemon off;'
start nginx_proxy nginx -c "$WORK/nginx_proxy/nginx.conf" -g 'daemon off;'
start nginx_static nginx -c "$WORK/nginx_static/nginx.conf" -g 'daemon off;'
start haproxy haproxy -db -f "$WORK/haproxy.cfg"
start caddy env HOME="$WORK" XDG_DATA_HOME="$WORK" XDG_CONFIG_HOME="$WORK" \
    caddy run --adapter caddyfile --config "$WORK/Caddyfile"
start slipway_proxy "$EDGE" proxy "127.0.0.1:$SLIPWAY_PROXY" "127.0.0.1:$BACKEND"
start slipway_static "$EDGE" static "127.0.0.1:$SLIPWAY_STATIC" "$WORK/site"

for port in $BACKEND $NGINX_PROXY $HAPROXY $CADDY $SLIPWAY_PROXY $NGINX_STATIC $SLIPWAY_STATIC; do
    for _ in $(seq 1 100); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/1k.txt" 2>/dev/null && break
        curl -s -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break
        sleep 0.1
    done
done

# CPU ticks (utime + stime) of a process and its direct children (nginx workers).
cpu_ticks() {
    local total=0 pid
    for pid in $1 $(ps --ppid "$1" -o pid= 2>/dev/null); do
        [ -r "/proc/$pid/stat" ] || continue
        total=$((total + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat")))
    done
    echo "$total"
}
TICKS=$(getconf CLK_TCK)

RESULTS="$WORK/results.tsv"
: >"$RESULTS"
run() { # label, server pid, url
    local label=$1 pid=$2 url=$3
    wrk -t1 -c16 -d1s "$url" >/dev/null # warm-up (pools, caches)
    local before after output
    before=$(cpu_ticks "$pid")
    output=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$url")
    after=$(cpu_ticks "$pid")
    python3 - "$label" "$((after - before))" "$TICKS" >>"$RESULTS" <<PY
import re, sys
label, ticks, per_second = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = """$output"""
requests = int(re.search(r"(\d+) requests in", text).group(1))
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)
p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
cpu_us = ticks / per_second * 1e6 / max(requests, 1)
print(f"{label}\t{rate:.0f}\t{p99_ms:.2f}\t{cpu_us:.1f}\t{errors.group(1) if errors else 0}")
PY
    tail -n1 "$RESULTS" >&2
}

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, loopback, $(nproc) cores, $ROUNDS rounds" >&2
for round in $(seq 1 "$ROUNDS"); do
    run "nginx proxy (upstream keep-alive)" "$PID_nginx_proxy" "http://127.0.0.1:$NGINX_PROXY/"
    run "HAProxy proxy" "$PID_haproxy" "http://127.0.0.1:$HAPROXY/"
    run "Caddy proxy" "$PID_caddy" "http://127.0.0.1:$CADDY/"
    run "Slipway proxy" "$PID_slipway_proxy" "http://127.0.0.1:$SLIPWAY_PROXY/"
    run "nginx static 1 KiB" "$PID_nginx_static" "http://127.0.0.1:$NGINX_STATIC/1k.txt"
    run "Slipway static 1 KiB" "$PID_slipway_static" "http://127.0.0.1:$SLIPWAY_STATIC/1k.txt"
    run "nginx static 100 KiB" "$PID_nginx_static" "http://127.0.0.1:$NGINX_STATIC/100k.txt"
    run "Slipway static 100 KiB" "$PID_slipway_static" "http://127.0.0.1:$SLIPWAY_STATIC/100k.txt"
done

python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, rate, p99, cpu, errors = line.rstrip("\n").split("\t")
    rows.setdefault(label, []).append((float(rate), float(p99), float(cpu), int(errors)))
median = {label: [statistics.median(column) for column in zip(*runs)] for label, runs in rows.items()}
def reference(label):
    for size in ("1 KiB", "100 KiB"):
        if f"static {size}" in label:
            return median[f"nginx static {size}"]
    return median["nginx proxy (upstream keep-alive)"]
print("| target | req/s | p99 ms | server CPU µs/req | non-2xx | req/s vs nginx | CPU/req vs nginx |")
print("|---|---:|---:|---:|---:|---:|---:|")
for label, (rate, p99, cpu, errors) in median.items():
    ref = reference(label)
    print(f"| {label} | {rate:.0f} | {p99:.2f} | {cpu:.1f} | {errors:.0f} | {rate / ref[0]:.2f} | {cpu / ref[2]:.2f} |")
PY
