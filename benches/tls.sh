#!/usr/bin/env bash
# TLS benchmark: Slipway's tls module (rustls + ring, SNI resolver, hyper) next to nginx serving
# the very same certificate (ECDSA P-256 leaf + intermediate from the internal CA), in one run.
#
#   handshakes:  wrk with "Connection: close": every request is a new TCP + full TLS handshake
#   throughput:  wrk with keep-alive: HTTPS requests per second on established connections
#
# Each is reported as requests/s and server CPU per request (utime+stime from /proc, all of the
# server's processes), which is steadier than req/s on a shared machine. Only same-run ratios
# mean anything. Needs: wrk, nginx (Debian packages `wrk`, `nginx`).
# Usage: benches/tls.sh [seconds per measurement, default 8]
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-8}"
for tool in wrk nginx python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is not installed"; exit 0; }
done

server_bin=$(cargo bench --bench tls_server --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "tls_server" and m.get("executable"):
        print(m["executable"])')
[ -x "$server_bin" ] || { echo "could not build benches/tls_server.rs"; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$server_bin" "$work" &
pids+=($!)
slipway_pid=$!
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.1; done
slipway_port=$(cat "$work/port")

nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/nginx"
cat > "$work/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx;
  proxy_temp_path $work/nginx;
  fastcgi_temp_path $work/nginx;
  uwsgi_temp_path $work/nginx;
  scgi_temp_path $work/nginx;
  server {
    listen 127.0.0.1:$nginx_port ssl http2;
    ssl_certificate $work/chain.pem;
    ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / { default_type text/plain; return 200 "hello world\n"; }
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/nginx.pid" ] && break; sleep 0.1; done
nginx_master=$(cat "$work/nginx.pid")

# Both serve the same leaf: checked before measuring.
for port in "$slipway_port" "$nginx_port"; do
  curl --silent --fail --cacert "$work/root.pem" --resolve "localhost:$port:127.0.0.1" "https://localhost:$port/" >/dev/null \
    || { echo "server on port $port does not answer over HTTPS"; exit 1; }
done

ticks=$(getconf CLK_TCK)
cpu_ticks() { # total utime+stime of the given pids and their children processes
  local total=0 pid
  for pid in "$@" $(for p in "$@"; do pgrep -P "$p" || true; done); do
    [ -r "/proc/$pid/stat" ] || continue
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}

measure() { # name, port, pid, mode (handshake|keepalive), connections
  local name=$1 port=$2 pid=$3 mode=$4 connections=$5 header=() before after out rps requests
  [ "$mode" = handshake ] && header=(-H "Connection: close")
  before=$(cpu_ticks "$pid")
  out=$(wrk -t1 -c"$connections" -d"${duration}s" "${header[@]}" "https://localhost:$port/")
  after=$(cpu_ticks "$pid")
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  requests=$(echo "$out" | awk '/requests in/ {print $1}')
  errors=$(echo "$out" | awk '/Socket errors|Non-2xx/ {print}' | tr '\n' ' ')
  python3 -c "import sys; n,mode,rps,req,cpu,t,err=sys.argv[1:]; print(f'{n:8} {mode:10} {float(rps):>10.0f} req/s  {int(cpu)*1e6/int(t)/max(int(req),1):8.1f} us CPU/req  {err}')" \
    "$name" "$mode" "$rps" "$requests" "$((after - before))" "$ticks" "${errors:-}"
}

echo "wrk -t1, ${duration}s each, https://localhost:<port>/ (12-byte body), same certificate; $(nproc) cores"
for round in 1 2; do
  measure slipway "$slipway_port" "$slipway_pid" handshake 32
  measure nginx "$nginx_port" "$nginx_master" handshake 32
  measure slipway "$slipway_port" "$slipway_pid" keepalive 64
  measure nginx "$nginx_port" "$nginx_master" keepalive 64
done
