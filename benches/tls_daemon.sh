#!/usr/bin/env bash
# TLS benchmark through the real daemon: a release `slipway serve` (tls.mode = "files", so the
# very same ECDSA P-256 leaf and key can be given to nginx) serving a static site deployed by the
# real pipeline, next to nginx serving the same file with the same certificate, in one run.
#
#   handshakes:  wrk with "Connection: close": every request is a new TCP + full TLS handshake
#   throughput:  wrk with keep-alive: HTTPS requests per second on established connections
#
# wrk connects to https://localhost:<port>/ (SNI "localhost", which resolves without DNS set-up;
# the leaf names it) with "Host: site.localhost", which the daemon routes to the app. Reported
# as requests/s and server CPU per request (utime+stime from /proc). Only same-run ratios mean
# anything. benches/tls.sh measures the tls module alone (benches/tls_server.rs), with the
# internal CA's leaf. Needs: wrk, nginx, openssl, curl, python3.
# Usage: [SLIPWAY_BIN=path] benches/tls_daemon.sh [seconds per measurement, default 8]
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/lib.sh
duration="${1:-8}"
for tool in wrk nginx openssl curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is not installed"; exit 0; }
done
# SLIPWAY_BIN: an already built binary (e.g. to try the script with a debug build).
slipway_bin="${SLIPWAY_BIN:-}"
if [ -z "$slipway_bin" ]; then
  cargo build --release --bin slipway >/dev/null 2>&1 || { echo "could not build slipway"; exit 1; }
  slipway_bin=target/release/slipway
fi

work=$(mktemp -d); [ -n "${KEEP_WORK:-}" ] && echo "work dir: $work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid" 2>/dev/null)" 2>/dev/null || true
  sleep 0.5
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The operator's certificate (benches/lib.sh): the daemon (files mode) and nginx serve the very
# same leaf and key.
bench_certificate "$work" localhost site.localhost slipway.localhost

http_port=$(free_port)
https_port=$(free_port)
cat >"$work/slipway.toml" <<CONF
data_dir = "$work/data"
apps_domain = "localhost"
control_host = "slipway.localhost"
http_listen = "127.0.0.1:$http_port"
https_listen = "127.0.0.1:$https_port"

[tls]
mode = "files"
cert_file = "$work/chain.pem"
key_file = "$work/key.pem"

[sandbox]
mode = "none"
CONF
SLIPWAY_LOG=warn "$slipway_bin" serve --config "$work/slipway.toml" >"$work/slipway.out" 2>"$work/slipway.log" &
pids+=($!)
slipway_pid=$!
for _ in $(seq 1 300); do grep -qx ready "$work/slipway.out" 2>/dev/null && break; sleep 0.1; done
grep -qx ready "$work/slipway.out" || { echo "slipway did not start:"; cat "$work/slipway.log"; exit 1; }

# The static site, deployed by the real pipeline (upload + provision, no build).
mkdir -p "$work/site/public"
printf 'hello world\n' >"$work/site/public/index.html"
tar -czf "$work/site.tar.gz" -C "$work/site" public
# nginx's workers (www-data) read the same file.
chmod 711 "$work"
chmod -R a+rX "$work/site"
token=$(cat "$work/data/initial-admin-token")
api() { curl --silent --show-error --fail --max-time 30 -H "host: slipway.localhost" -H "authorization: Bearer $token" "$@"; }
api -H "content-type: application/gzip" --data-binary "@$work/site.tar.gz" \
  "http://127.0.0.1:$http_port/api/projects/site/source" >/dev/null
provisioning=$(api -H "content-type: application/json" \
  --data '{"projectSlug":"site","installCommand":"","buildCommand":""}' \
  "http://127.0.0.1:$http_port/api/projects/site/provision" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["provisioningId"])')
status=provisioning_in_progress
for _ in $(seq 1 300); do
  status=$(api "http://127.0.0.1:$http_port/api/provisioning/$provisioning/status" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  [ "$status" = provisioning_in_progress ] || break
  sleep 0.2
done
[ "$status" = provisioning_complete ] || { echo "provisioning ended $status"; exit 1; }

nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat >"$work/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  include /etc/nginx/mime.types;
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
    root $work/site/public;
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/nginx.pid" ] && break; sleep 0.1; done
nginx_master=$(cat "$work/nginx.pid")

# Both serve the same leaf and the same page: checked before measuring.
for port in "$https_port" "$nginx_port"; do
  body=$(curl --silent --fail --cacert "$work/ca.pem" --resolve "localhost:$port:127.0.0.1" \
    -H "host: site.localhost" "https://localhost:$port/") \
    || { echo "server on port $port does not answer over HTTPS"; exit 1; }
  [ "$body" = "hello world" ] || { echo "port $port answered: $body"; exit 1; }
  served=$(openssl s_client -connect "127.0.0.1:$port" -servername localhost </dev/null 2>/dev/null \
    | openssl x509 -noout -fingerprint -sha256)
  [ "$served" = "$(openssl x509 -in "$work/leaf.pem" -noout -fingerprint -sha256)" ] \
    || { echo "port $port serves another certificate"; exit 1; }
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
  out=$(wrk -t1 -c"$connections" -d"${duration}s" -H "Host: site.localhost" "${header[@]}" "https://localhost:$port/")
  after=$(cpu_ticks "$pid")
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  requests=$(echo "$out" | awk '/requests in/ {print $1}')
  errors=$(echo "$out" | awk '/Socket errors|Non-2xx/ {print}' | tr '\n' ' ')
  python3 -c "import sys; n,mode,rps,req,cpu,t,err=sys.argv[1:]; print(f'{n:8} {mode:10} {float(rps):>10.0f} req/s  {int(cpu)*1e6/int(t)/max(int(req),1):8.1f} us CPU/req  {err}')" \
    "$name" "$mode" "$rps" "$requests" "$((after - before))" "$ticks" "${errors:-}"
}

echo "wrk -t1, ${duration}s each, https://localhost:<port>/ with Host site.localhost (12-byte static file), same certificate; $(nproc) cores"
for round in 1 2; do
  measure slipway "$https_port" "$slipway_pid" handshake 32
  measure nginx "$nginx_port" "$nginx_master" handshake 32
  measure slipway "$https_port" "$slipway_pid" keepalive 64
  measure nginx "$nginx_port" "$nginx_master" keepalive 64
done
