#!/usr/bin/env bash
# Generates a Python client from the running daemon's OpenAPI document with
# openapi-python-client (PyPI), byte-compiles it, and deploys a static site with it
# (tests/api/client_deploy.py). SLIPWAY_BIN defaults to target/debug/slipway.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/api/daemon.sh
if ! command -v openapi-python-client >/dev/null 2>&1; then
  echo "SKIP generated client: openapi-python-client is not installed (pip install openapi-python-client)"
  exit 0
fi
start_daemon client
curl -sf -H "Host: slipway.localhost" -H "Authorization: Bearer $token" \
  "http://127.0.0.1:$port/api/openapi.json" -o "$dir/openapi.json"
(cd "$dir" && openapi-python-client generate --path openapi.json --meta none \
  --output-path slipway_client >"$dir/generate.log" 2>&1) || { cat "$dir/generate.log"; exit 1; }
python3 -m compileall -q "$dir/slipway_client"
PYTHONPATH="$dir" python3 tests/api/client_deploy.py "http://127.0.0.1:$port" "$token"
