#!/usr/bin/env bash
# schemathesis 4 against a real daemon on loopback: every phase (examples, coverage, fuzzing,
# stateful through the document's links) and every check but ensure_resource_availability
# (see schemathesis.toml for why, and for the one per-operation setting). Exits non-zero on any
# failure. The daemon runs in sandbox mode "auto" (namespaces as root), so nothing the fuzzer
# generates runs unsandboxed where a sandbox is possible.
#   SLIPWAY_BIN (default $CARGO_TARGET_DIR or target, /debug/slipway), SCHEMATHESIS_EXAMPLES (default 50)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/api/daemon.sh
if ! command -v schemathesis >/dev/null 2>&1; then
  echo "SKIP schemathesis: not installed (pip install schemathesis)"
  exit 0
fi
start_daemon schemathesis "[rate_limits]
requests_per_minute = 1000000
posts_per_minute_per_endpoint = 1000000"
SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH=tests/api \
  schemathesis --config-file tests/api/schemathesis.toml run \
  "http://127.0.0.1:$port/api/openapi.json" \
  -H "Host: slipway.localhost" -H "Authorization: Bearer $token" \
  --checks all --exclude-checks ensure_resource_availability \
  --max-examples "${SCHEMATHESIS_EXAMPLES:-50}" --no-color
