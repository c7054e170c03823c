#!/usr/bin/env bash
# Runs every Slipway test. As root on Debian it first installs what the tests use
# (nftables and iproute2 for the sandbox, pebble for ACME, git, curl, node/npm for app builds;
# lintian, debootstrap, systemd-container and cargo-deb for the package and its install test;
# postgresql-15 and redis-server for the add-on tests; docker.io for the Swarm tests, whose
# dockerd the tests start themselves);
# the dashboard's type check fetches a pinned TypeScript from npm;
# tests whose tool or privilege is missing print "SKIP: <reason>" instead of failing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # prometheus: its promtool checks the /metrics page (tests/it/observability.rs).
  # chromium: the dashboard's browser test (tests/it/dashboard.rs), over the DevTools protocol.
  wanted=(nftables iproute2 pebble git curl ca-certificates e2fsprogs python3-pip prometheus
          systemd lintian debootstrap systemd-container chromium chromium-driver
          postgresql-15 redis-server docker.io)
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
  # The .deb is made by cargo-deb (crates.io; about a minute to compile, once per machine).
  # Pinned: 3.x still builds a package from the dev profile's binary (see below).
  command -v cargo-deb >/dev/null 2>&1 || cargo install --locked cargo-deb --version '~3.8'
else
  echo "not root (or no apt-get): not installing test dependencies; tests that need them will SKIP"
fi

cargo build --locked --all-targets
# The dashboard's JavaScript, type-checked (TypeScript from npm, pinned; SKIPs without node).
bash tests/dashboard/typecheck.sh
# Benches are built above (so they keep compiling) but are run by benches/*.sh, not here.
cargo test --locked --lib --bins --tests -- --test-threads="${SLIPWAY_TEST_THREADS:-4}"
# The OpenAPI document against the real daemon: schemathesis (every phase and check), and a
# client generated from it that deploys a site.
bash tests/api/schemathesis.sh
bash tests/api/client.sh

# The package: built from the binary just compiled (the dev profile, stripped; a release
# build would add minutes; `cargo deb` alone makes the release package), checked by lintian
# (no errors; overrides are justified in packaging/lintian-overrides), then installed on a
# clean Debian 12 booted under systemd (tests/install/e2e.sh: skips when not root).
if command -v cargo-deb >/dev/null 2>&1; then
  rm -rf target/debian
  cargo deb --profile dev --no-build --strip -o target/debian/ 2>&1 | grep -v "dev profile\|debug symbols set" || true
  deb="$(ls target/debian/slipway_*.deb)"
  if command -v lintian >/dev/null 2>&1; then
    lintian --fail-on error "$deb"
    echo "lintian: no errors in $deb"
  else
    echo "SKIP: lintian is not installed (apt-get install lintian)"
  fi
  # With the integration-test binary: the sandbox tests also run in the container, under
  # the unit's properties (see tests/install/e2e.sh).
  it_binary="$(ls -t target/debug/deps/it-* | grep -v '\.d$' | head -1)"
  SLIPWAY_E2E_IT_BINARY="$it_binary" bash tests/install/e2e.sh "$deb"
else
  echo "SKIP: package tests: cargo-deb is not installed (cargo install --locked cargo-deb)"
fi
