#!/usr/bin/env bash
# End-to-end install test of the .deb on a clean Debian 12 booted with systemd as PID 1
# (systemd-nspawn): dpkg -i, set apps_domain, enable slipway.socket + slipway.service,
# deploy a static site and a node app (sandbox mode namespaces, under the hardened unit),
# `systemctl restart slipway` under load (0 failed requests), apt-get remove (stop-apps,
# data kept), purge.
#
# Usage: tests/install/e2e.sh PATH/TO/slipway_*.deb
# Needs root, debootstrap and systemd-container; prints "SKIP: <reason>" and exits 0 when
# they are missing. The debootstrap tree is cached in $SLIPWAY_E2E_CACHE (default
# /var/cache/slipway-test/bookworm) and never changed by a run (the container's root is an
# overlay on tmpfs). Bounded: the container is killed after $SLIPWAY_E2E_TIMEOUT s (300).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
deb="${1:?usage: e2e.sh PATH/TO/slipway.deb}"
deb="$(realpath "$deb")"
cache="${SLIPWAY_E2E_CACHE:-/var/cache/slipway-test/bookworm}"
timeout_s="${SLIPWAY_E2E_TIMEOUT:-300}"

skip() { echo "SKIP: install e2e test: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, systemd-nspawn)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (apt-get install debootstrap)"
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn is not installed (apt-get install systemd-container)"
node="$(command -v node || true)"
[ -n "$node" ] || skip "node is not installed on the host (the node app uses the host's node, bound read-only)"

marker="$cache/.slipway-e2e-v2"
if [ ! -e "$marker" ]; then
  if [ ! -x "$cache/usr/lib/systemd/systemd" ]; then
    echo "e2e: debootstrap bookworm into $cache (once; about a minute)"
    rm -rf "$cache.tmp"
    mkdir -p "$(dirname "$cache")"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus \
      bookworm "$cache.tmp" http://deb.debian.org/debian >/dev/null
    mv "$cache.tmp" "$cache"
  fi
  # The package's dependencies and the tests' tools (python3: the sandbox tests' apps and
  # probes): the container has no network.
  chroot "$cache" apt-get install -y -qq --no-install-recommends \
    nftables iproute2 git ca-certificates curl procps python3 >/dev/null
  # The test's own unit: runs /e2e/inner.sh once the system is up, then powers off.
  cat >"$cache/etc/systemd/system/slipway-e2e.service" <<'EOF'
[Unit]
Description=Slipway install test
ConditionPathExists=/e2e/inner.sh
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/bin/sh -c '/e2e/inner.sh >/results/log 2>&1; echo $? >/results/rc'
ExecStartPost=/usr/bin/systemctl --no-block poweroff
[Install]
WantedBy=multi-user.target
EOF
  mkdir -p "$cache/etc/systemd/system/multi-user.target.wants"
  ln -sf /etc/systemd/system/slipway-e2e.service \
    "$cache/etc/systemd/system/multi-user.target.wants/slipway-e2e.service"
  echo "slipway-e2e" >"$cache/etc/hostname"
  touch "$marker"
fi

results="$(mktemp -d)"
work="$(mktemp -d)"
trap 'rm -rf "$work" "$results"' EXIT
cp "$deb" "$work/slipway.deb"
cp "$here/inner.sh" "$work/inner.sh"
# The sandbox mode of the daemon in the container: "namespaces" (the real sandbox, under the
# hardened unit) unless SLIPWAY_E2E_SANDBOX says otherwise. On a cgroup v1 host (these CI
# machines) systemd-nspawn mounts the controller hierarchies read-only in the container;
# inner.sh mounts them again writable, as a v1 host gives them to the daemon. User
# namespaces, nftables and veths work in the container as they are.
echo "${SLIPWAY_E2E_SANDBOX:-namespaces}" >"$work/sandbox_mode"
# SLIPWAY_E2E_IT_BINARY=target/debug/deps/it-…: after the install test, the integration
# tests named by SLIPWAY_E2E_IT_FILTER (default "sandbox": the sandbox and sandboxed
# modules) run inside the container under the hardened unit's own properties (systemd-run),
# so every daemon and sandbox they start is confined as slipway.service would be.
extra_binds=()
if [ -n "${SLIPWAY_E2E_IT_BINARY:-}" ]; then
  it="$(realpath "$SLIPWAY_E2E_IT_BINARY")"
  debug_dir="$(dirname "$(dirname "$it")")"   # target/debug: the test binary and slipway
  extra_binds+=(--bind-ro="$debug_dir:$debug_dir")
  echo "$it" >"$work/it_binary"
  echo "${SLIPWAY_E2E_IT_FILTER:-sandbox}" >"$work/it_filter"
  # Skipped there, because the *test process* runs under the unit too, not because of the
  # daemon: the connection-cap test writes its script with the unit's UMask=0077 (the
  # daemon unpacks sources for the project's uid itself), the store test checks that
  # /root/.bashrc exists (ProtectHome hides /root from the test), and the /etc test plants
  # keys in /etc (read-only under ProtectSystem=strict). The disk-limit and build-cache
  # tests run here, on the host's loop devices (below).
  echo "${SLIPWAY_E2E_IT_SKIP:-a_sandbox_cannot_hold_more_than_its_connection_cap a_build_cannot_read_the_store_other_projects_or_root_nor_write_system_dirs a_build_sees_only_an_allow_list_of_etc}" >"$work/it_skip"
  # The unit's [Service] settings as systemd-run properties (not how it is started).
  sed -n '/^\[Service\]/,/^\[Install\]/p' "$here/../../systemd/slipway.service" \
    | grep -E '^[A-Za-z]+=' \
    | grep -vE '^(Type|ExecStartPre|ExecStart|Restart|RestartSec|Sockets|StateDirectory|StateDirectoryMode|TimeoutStopSec|Environment)=' \
    >"$work/unit_properties"
fi
# Loop devices: systemd-nspawn gives the container none, and without them the daemon
# (rightly) runs without disk limits. Only the host's /dev/loop-control is bound in, no
# /dev/loopN node: the container's /dev is static (it never gets the nodes of loop devices the
# kernel adds later), so the daemon under the unit (and the tests' own small disks) make the
# node of each device the kernel hands out, whatever number of nodes the host happens to have
# (issue 29: binding the host's nodes failed on a machine that had used few loop devices).
# inner.sh fails when loop devices work but the daemon under the unit reports
# diskLimits: false.
if [ -e /dev/loop-control ]; then
  extra_binds+=(--bind=/dev/loop-control)
fi
# For experiments with the unit: a drop-in installed before the daemon starts.
if [ -n "${SLIPWAY_E2E_DROPIN:-}" ]; then cp "$SLIPWAY_E2E_DROPIN" "$work/dropin.conf"; fi
chmod +x "$work/inner.sh"

# --private-network: the container gets its own network namespace (loopback only), so the
# daemon's nftables table, veths and ports 80/443 never touch the host's; systemd-nspawn
# then also grants CAP_NET_ADMIN. --volatile=overlay: the cached tree stays clean.
# The host's cgroups are v1 here: the container's systemd gets a legacy/hybrid tree, and
# the daemon's Delegate=yes subtree is what the sandbox uses.
echo "e2e: booting the container (at most ${timeout_s}s)"
set +e
timeout --kill-after=10 "$timeout_s" systemd-nspawn --quiet --register=no --keep-unit \
  -D "$cache" --volatile=overlay --private-network \
  --bind-ro="$work:/e2e" --bind="$results:/results" --bind-ro="$node:/usr/local/bin/node" \
  "${extra_binds[@]}" \
  -b >"$results/console" 2>&1
nspawn_rc=$?
set -e
cat "$results/log" 2>/dev/null || { echo "e2e: no log; console:"; tail -50 "$results/console"; }
rc="$(cat "$results/rc" 2>/dev/null || echo missing)"
echo "e2e: container exit $nspawn_rc, test result $rc"
[ "$rc" = 0 ]
