# Sourced by the tests/api scripts: start_daemon NAME [EXTRA_TOML] starts the daemon
# ($SLIPWAY_BIN, default $CARGO_TARGET_DIR or target, /debug/slipway) on a free loopback port
# with its data in a temp dir, sandbox mode "auto" (namespaces as root), TLS off, and waits for
# "ready". Custom domains' TXT proofs are asked of a closed loopback port (so none leaves
# the machine, and none is proven). It sets $dir, $port and $token, and stops the daemon and its apps on exit.
bin=${SLIPWAY_BIN:-${CARGO_TARGET_DIR:-target}/debug/slipway}

start_daemon() {
  dir=$(mktemp -d "/var/tmp/slipway-$1.XXXXXX")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat >"$dir/slipway.toml" <<TOML
apps_domain = "localhost"
data_dir = "$dir/data"
http_listen = "127.0.0.1:$port"
[domains]
nameserver = "127.0.0.1:9"
[sandbox]
mode = "auto"
instance = "slw${1:0:2}$$"
[tls]
mode = "off"
${2:-}
TOML
  "$bin" serve --config "$dir/slipway.toml" >"$dir/log" 2>&1 &
  pid=$!
  trap stop_daemon EXIT
  for _ in $(seq 300); do
    grep -q '^ready$' "$dir/log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$dir/log"; exit 1; }
    sleep 0.1
  done
  grep -q '^ready$' "$dir/log" || { echo "the daemon did not become ready"; cat "$dir/log"; exit 1; }
  token=$(cat "$dir/data/initial-admin-token")
}

stop_daemon() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  "$bin" stop-apps --config "$dir/slipway.toml" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
