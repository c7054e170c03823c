# Shared by the benches (sourced): release daemons on loopback, each in a directory of its
# own, stopped when the script exits.
#
#   bench_daemon DIR [SANDBOX] [EXTRA_TOML]
# writes DIR/slipway.toml (TLS off, apps at *.localhost, rate limits out of the way, sandbox
# SANDBOX, default none; EXTRA_TOML appended, e.g. a [limits] table; the [tls] table's body
# from $BENCH_TLS when set, e.g. files mode with bench_certificate's files), starts "$BIN" serve
# (${WRAP:-} in front, e.g. WRAP=heaptrack) with its stdout in DIR/out and its log in DIR/log,
# $BENCH_SANDBOX_TOML is added to the [sandbox] table when set (e.g. instance and subnet),
# waits up to 30 s for "ready" and sets DAEMON_PID, DAEMON_ADDR (http host:port),
# DAEMON_HTTPS_ADDR (empty with TLS off) and DAEMON_TOKEN. Stops the script, showing the log, if the daemon does not start.
#
#   bench_certificate DIR NAME...
# an operator's certificate for the TLS benches: a throw-away CA and an ECDSA P-256 leaf for
# the NAMEs, so that the daemon (tls.mode files), nginx and HAProxy serve the very same chain
# and key. Writes DIR/key.pem, DIR/leaf.pem, DIR/chain.pem (leaf then CA: what the daemon's
# ssl_verification trusts in files mode) and DIR/haproxy.pem (chain and key in one file, the
# form HAProxy's `crt` takes). Needs openssl.

#   bench_nginx_app TARBALL
# the bench's server-mode app: nginx answering a 23-byte body. Writes its source (an
# nginx.conf template) to TARBALL and sets BENCH_APP_START, its start command, which takes
# nginx's temp dir and listen address from the project's env vars BENCH_TMP and BENCH_HOST
# (only PORT is known when the app starts).
#
#   bench_haproxy_cfg FILE BIND SERVER
# the HAProxy config every bench compares against: 2 threads, HTTP keep-alive both ways,
# `http-reuse always`, X-Forwarded-For; BIND is a `bind` line's arguments, SERVER the backend
# address.

#   bench_bin
# sets BIN to a release daemon built now, unless BIN is set (e.g. BIN=target/debug/slipway).
#
#   bench_hello_apps DIR
# the hello-world apps (answer "hello\n" on $PORT): DIR/node/server.js, DIR/python/server.py,
# and their sources as DIR/node.tgz and DIR/python.tgz.
#
#   bench_cleanup DAEMON_DIR
# at exit: stops the daemons, the apps DAEMON_DIR's daemon left (apps outlive a daemon that
# stops) and removes $WORK.

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
    local dir=$1 sandbox=${2:-none} extra=${3:-} tls='mode = "off"'
    [ -n "${BENCH_TLS:-}" ] && tls=$BENCH_TLS
    mkdir -p "$dir"
    cat >"$dir/slipway.toml" <<TOML
data_dir = "$dir/data"
apps_domain = "localhost"
http_listen = "127.0.0.1:0"
https_listen = "127.0.0.1:0"
[tls]
$tls
[sandbox]
mode = "$sandbox"
${BENCH_SANDBOX_TOML:-}
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
    DAEMON_HTTPS_ADDR="$(sed -n 's/^listening https //p' "$dir/out")"
    DAEMON_TOKEN="$(cat "$dir/data/initial-admin-token")"
}

bench_certificate() {
    local d=$1 sans
    shift
    sans=$(printf 'DNS:%s,' "$@")
    mkdir -p "$d"
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$d/ca.key" -subj "/CN=Slipway bench CA" -days 30 -out "$d/ca.pem" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/leaf.key" 2>/dev/null
    openssl pkcs8 -topk8 -nocrypt -in "$d/leaf.key" -out "$d/key.pem"
    openssl req -new -key "$d/key.pem" -subj "/CN=$1" -out "$d/leaf.csr" 2>/dev/null
    printf '%s\n' "subjectAltName=${sans%,}" "basicConstraints=CA:FALSE" \
        "extendedKeyUsage=serverAuth" >"$d/leaf.ext"
    openssl x509 -req -in "$d/leaf.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
        -days 7 -extfile "$d/leaf.ext" -out "$d/leaf.pem" 2>/dev/null
    cat "$d/leaf.pem" "$d/ca.pem" >"$d/chain.pem"
    cat "$d/chain.pem" "$d/key.pem" >"$d/haproxy.pem"
}

bench_haproxy_cfg() {
    cat >"$1" <<EOF2
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
    bind $2
    default_backend app
backend app
    http-reuse always
    server app $3
EOF2
}

bench_nginx_app() {
    local source
    source=$(mktemp -d)
    cat >"$source/nginx.conf.in" <<'EOF'
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
    tar czf "$1" -C "$source" .
    rm -rf "$source"
    # shellcheck disable=SC2016 # expanded by the app's shell, not this one
    BENCH_APP_START='PATH="$PATH:/usr/sbin" T="$BENCH_TMP/nginx" && mkdir -p "$T" && sed -e "s|@TMP@|$T|g" -e "s|@HOST@|$BENCH_HOST|" -e "s|@PORT@|$PORT|" nginx.conf.in >"$T/nginx.conf" && exec nginx -p "$T" -e stderr -c "$T/nginx.conf" -g "daemon off;"'
}

bench_bin() {
    if [ -z "${BIN:-}" ]; then
        cargo build --release --quiet --bin slipway
        BIN="$PWD/target/release/slipway"
    fi
}

bench_hello_apps() {
    mkdir -p "$1/node" "$1/python"
    cat >"$1/node/server.js" <<'JS'
require('http').createServer((req, res) => res.end('hello\n')).listen(+process.env.PORT);
JS
    cat >"$1/python/server.py" <<'PY'
import http.server, os
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello\n")
http.server.HTTPServer(("", int(os.environ["PORT"])), Hello).serve_forever()
PY
    tar czf "$1/node.tgz" -C "$1/node" .
    tar czf "$1/python.tgz" -C "$1/python" .
}

bench_cleanup() {
    bench_stop_daemons
    "$BIN" stop-apps --config "$1/slipway.toml" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
