#!/usr/bin/env bash
# schemathesis 4 against a real daemon on loopback: every phase (examples, coverage, fuzzing,
# stateful through the document's links) and every check but ensure_resource_availability
# (see schemathesis.toml for why, and for the one per-operation setting). Exits non-zero on any
# failure. The daemon runs in sandbox mode "auto" (namespaces as root), so nothing the fuzzer
# generates runs unsandboxed where a sandbox is possible.
#   SLIPWAY_BIN (default $CARGO_TARGET_DIR or target, /debug/slipway), SCHEMATHESIS_EXAMPLES (default 50)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${SLIPWAY_BIN:-${CARGO_TARGET_DIR:-target}/debug/slipway}
if ! command -v schemathesis >/dev/null 2>&1; then
  echo "SKIP schemathesis: not installed (pip install schemathesis)"
  exit 0
fi
dir=$(mktemp -d /var/tmp/slipway-schemathesis.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$dir/slipway.toml" <<TOML
apps_domain = "localhost"
data_dir = "$dir/data"
http_listen = "127.0.0.1:$port"
[sandbox]
mode = "auto"
instance = "slwst$$"
[tls]
mode = "off"
[rate_limits]
requests_per_minute = 1000000
posts_per_minute_per_endpoint = 1000000
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
SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH=tests/api \
  schemathesis --config-file tests/api/schemathesis.toml run \
  "http://127.0.0.1:$port/api/openapi.json" \
  -H "Host: slipway.localhost" -H "Authorization: Bearer $token" \
  --checks all --exclude-checks ensure_resource_availability \
  --max-examples "${SCHEMATHESIS_EXAMPLES:-50}" --no-color
