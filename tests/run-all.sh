#!/usr/bin/env bash
# Runs every Slipway test. As root on Debian it first installs what the tests use
# (nftables and iproute2 for the sandbox, pebble for ACME, git, curl, node/npm for app builds);
# tests whose tool or privilege is missing print "SKIP: <reason>" instead of failing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # prometheus: its promtool checks the /metrics page (tests/it/observability.rs).
  wanted=(nftables iproute2 pebble git curl ca-certificates e2fsprogs python3-pip prometheus)
  command -v node >/dev/null 2>&1 || wanted+=(nodejs)
  command -v npm >/dev/null 2>&1 || wanted+=(npm)
  missing=()
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing test dependencies: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  # The API's fuzzer and client generator (PyPI).
  for tool in schemathesis:schemathesis openapi-python-client:openapi-python-client; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || python3 -m pip install -q --break-system-packages "${tool#*:}" 2>/dev/null \
      || python3 -m pip install -q "${tool#*:}"
  done
else
  echo "not root (or no apt-get): not installing test dependencies; tests that need them will SKIP"
fi

cargo build --locked --all-targets
# Benches are built above (so they keep compiling) but are run by benches/*.sh, not here.
cargo test --locked --lib --bins --tests -- --test-threads="${SLIPWAY_TEST_THREADS:-4}"
# The OpenAPI document against the real daemon: schemathesis (every phase and check), and a
# client generated from it that deploys a site.
bash tests/api/schemathesis.sh
bash tests/api/client.sh
