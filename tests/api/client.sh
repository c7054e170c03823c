#!/usr/bin/env bash
# Generates a Python client from the running daemon's OpenAPI document with
# openapi-python-client (PyPI), byte-compiles it, and deploys a static site with it
# (tests/api/client_deploy.py). SLIPWAY_BIN defaults to target/debug/slipway.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${SLIPWAY_BIN:-${CARGO_TARGET_DIR:-target}/debug/slipway}
if ! command -v openapi-python-client >/dev/null 2>&1; then
  echo "SKIP generated client: openapi-python-client is not installed (pip install openapi-python-client)"
  exit 0
fi
dir=$(mktemp -d /var/tmp/slipway-client.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$dir/slipway.toml" <<TOML
apps_domain = "localhost"
data_dir = "$dir/data"
http_listen = "127.0.0.1:$port"
[sandbox]
mode = "auto"
instance = "slwcl$$"
[tls]
mode = "off"
TOML
"$bin" serve --config "$dir/slipway.toml" >"$dir/log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  "$bin" stop-apps --config "$dir/slipway.toml" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 300); do
  grep -q '^ready$' "$dir/log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/log"; exit 1; }
  sleep 0.1
done
grep -q '^ready$' "$dir/log" || { echo "the daemon did not become ready"; cat "$dir/log"; exit 1; }
token=$(cat "$dir/data/initial-admin-token")
curl -sf -H "Host: slipway.localhost" -H "Authorization: Bearer $token" \
  "http://127.0.0.1:$port/api/openapi.json" -o "$dir/openapi.json"
(cd "$dir" && openapi-python-client generate --path openapi.json --meta none \
  --output-path slipway_client >"$dir/generate.log" 2>&1) || { cat "$dir/generate.log"; exit 1; }
python3 -m compileall -q "$dir/slipway_client"
PYTHONPATH="$dir" python3 tests/api/client_deploy.py "http://127.0.0.1:$port" "$token"
