#!/bin/sh
# Runs inside the e2e container (Debian 12, systemd as PID 1) as root; e2e.sh boots it.
# Every step prints "== step"; the first failure stops the test (exit code != 0).
set -eu
step() { echo "== $*"; }
fail() { echo "FAILED: $*"; journalctl -u slipway --no-pager | tail -60; exit 1; }
api() { curl -sS --max-time 60 -H "Host: slipway.apps.test" -H "Authorization: Bearer $token" "$@"; }

step "dpkg -i slipway.deb"
dpkg -i /e2e/slipway.deb
slipway --version
systemctl cat slipway.socket slipway-https.socket >/dev/null

step "configure: apps_domain, internal TLS (no ACME without a network), a plain API port"
conf=/etc/slipway/slipway.toml
sed -i 's/^apps_domain = .*/apps_domain = "apps.test"/; s/^mode = "acme"/mode = "internal"/' "$conf"
sed -i 's/^# api_listen = .*/api_listen = "127.0.0.1:7070"/' "$conf"
# e2e.sh says which sandbox mode this container can give (see the reason there).
sandbox_mode="$(cat /e2e/sandbox_mode)"
sed -i "s/^mode = \"namespaces\"/mode = \"$sandbox_mode\"/" "$conf"
grep -q "^mode = \"$sandbox_mode\"" "$conf" || fail "could not set sandbox.mode"
if [ "$sandbox_mode" = namespaces ] && mount | grep -q "on /sys/fs/cgroup/memory type cgroup (ro"; then
  # On a cgroup v1 host systemd-nspawn mounts the controller hierarchies read-only in the
  # container; the sandbox needs to create memory and pids cgroups. A fresh, writable mount
  # of each hierarchy (the container's cgroup namespace is its root) gives what a v1 host
  # gives the daemon outside a container.
  for c in memory pids cpu freezer; do
    umount "/sys/fs/cgroup/$c" 2>/dev/null || true
    mount -t cgroup -o "rw,nosuid,nodev,noexec,$c" cgroup "/sys/fs/cgroup/$c" || echo "($c not remounted)"
  done
  echo "cgroup v1 controllers remounted writable for the sandbox"
fi
echo "127.0.0.1 slipway.apps.test site.apps.test web.apps.test doctor-check.apps.test" >>/etc/hosts
slipway check-config --config "$conf"
echo "-- slipway doctor (before start):"
slipway doctor --config "$conf" || echo "(doctor exit $?)"

if [ -f /e2e/dropin.conf ]; then
  mkdir -p /etc/systemd/system/slipway.service.d
  cp /e2e/dropin.conf /etc/systemd/system/slipway.service.d/e2e.conf
  systemctl daemon-reload
  echo "unit drop-in:"; cat /e2e/dropin.conf
fi
step "systemctl enable --now slipway.socket slipway-https.socket slipway.service"
systemctl enable --now slipway.socket slipway-https.socket slipway.service || fail "slipway did not start"
for i in $(seq 1 100); do
  curl -sf --max-time 2 -H "Host: slipway.apps.test" http://127.0.0.1:7070/healthz >/dev/null && break
  sleep 0.2
done
systemctl is-active slipway.service || fail "slipway.service is not active"
journalctl -u slipway --no-pager | grep -q "using the socket systemd passed" || fail "the daemon did not take the sockets"
echo "sandbox mode: $(journalctl -u slipway --no-pager | grep -o 'sandbox=[a-z"]*' | tail -1)"
echo "-- exposure of the installed unit:"
systemd-analyze security slipway.service --no-pager | tail -1 || true
token="$(cat /var/lib/slipway/initial-admin-token)"
# Disk limits under the installed unit: on when loop devices work in this machine (the
# daemon's probe mount decides), and the unit's device policy must not be what turns them off.
disk_limits="$(api http://127.0.0.1:7070/api/system | sed -n 's/.*"diskLimits":\([a-z]*\).*/\1/p')"
echo "disk limits under the unit: $disk_limits ($(journalctl -u slipway --no-pager | grep -o 'disk limits.*instead' | tail -1))"
if [ "$disk_limits" != true ] && [ -e /dev/loop-control ] && losetup -f >/dev/null 2>&1; then
  fail "loop devices work in this machine but the daemon under the unit runs without disk limits"
fi
slipway ca export --config "$conf" >/tmp/ca.pem

deploy() { # slug dir provision-json
  tar -czf "/tmp/$1.tar.gz" -C "$2" .
  api -X POST -H "Content-Type: application/gzip" --data-binary "@/tmp/$1.tar.gz" \
    "http://127.0.0.1:7070/api/projects/$1/source" >/dev/null
  pid="$(api -X POST -H "Content-Type: application/json" -d "$3" \
    "http://127.0.0.1:7070/api/projects/$1/provision" | sed -n 's/.*"provisioningId":"\([^"]*\)".*/\1/p')"
  [ -n "$pid" ] || fail "provision of $1 was not accepted"
  for i in $(seq 1 300); do
    status="$(api "http://127.0.0.1:7070/api/provisioning/$pid/status")"
    case "$status" in
      *'"status":"provisioning_complete"'*) echo "$1: live"; return 0 ;;
      *'"status":"provisioning_failed"'*)
        echo "$status"
        dpl="$(echo "$status" | sed -n 's/.*"deploymentId":"\([^"]*\)".*/\1/p')"
        api "http://127.0.0.1:7070/api/deployments/$dpl/logs" | head -c 3000; echo
        fail "deploy of $1 failed" ;;
    esac
    sleep 0.2
  done
  fail "deploy of $1 did not finish: $status"
}
get() { curl -sS --max-time 30 --cacert /tmp/ca.pem --resolve "$1.apps.test:443:127.0.0.1" "https://$1.apps.test/"; }

step "deploy a static site"
mkdir -p /tmp/site/public && echo "<h1>static e2e</h1>" >/tmp/site/public/index.html
deploy site /tmp/site '{"projectSlug":"site","installCommand":"","buildCommand":""}'
get site | grep -q "static e2e" || fail "the static site is not served"

step "deploy a node app (the host's node, bound read-only at /usr/local/bin/node)"
mkdir -p /tmp/web
cat >/tmp/web/server.js <<'JS'
require("http").createServer((req, res) => res.end("node pid " + process.pid + "\n")).listen(process.env.PORT);
JS
deploy web /tmp/web '{"projectSlug":"web","installCommand":"","buildCommand":"","startCommand":"node server.js"}'
before="$(get web)"
echo "$before" | grep -q "node pid" || fail "the node app is not served: $before"
app_pid_before="$(pgrep -xf 'node server.js' | tr '\n' ' ' || true)"

step "systemctl restart slipway under load"
: >/tmp/load
load() { # sequential requests until /tmp/stop exists; one line per request: the HTTP code
  while [ ! -e /tmp/stop ]; do
    curl -s -o /dev/null -w '%{http_code}\n' --max-time 30 --cacert /tmp/ca.pem \
      --resolve "$1.apps.test:443:127.0.0.1" "https://$1.apps.test/" >>/tmp/load || echo "curl-exit-$?" >>/tmp/load
  done
}
load site & l1=$!
load web & l2=$!
sleep 2
daemon_pid_before="$(systemctl show -p MainPID --value slipway)"
systemctl restart slipway
daemon_pid_after="$(systemctl show -p MainPID --value slipway)"
sleep 2
touch /tmp/stop
wait $l1 $l2
total="$(wc -l </tmp/load)"
failed="$(grep -cv '^200$' /tmp/load || true)"
echo "requests during the restart: $total, failed: $failed (daemon pid $daemon_pid_before -> $daemon_pid_after)"
[ "$daemon_pid_before" != "$daemon_pid_after" ] || fail "the daemon did not restart"
[ "$failed" = 0 ] || { sort /tmp/load | uniq -c; fail "requests failed during the restart"; }
app_pid_after="$(pgrep -xf 'node server.js' | tr '\n' ' ' || true)"
if [ "$app_pid_before" = "$app_pid_after" ]; then
  echo "the node app kept its pid ($app_pid_before)"
else
  dpl="$(api http://127.0.0.1:7070/api/projects/web | sed -n 's/.*"liveDeploymentId":"\([^"]*\)".*/\1/p')"
  api "http://127.0.0.1:7070/api/deployments/$dpl/logs?stream=system" | tail -c 2000; echo
  fail "the node app's pid changed ($app_pid_before -> $app_pid_after): the restart did not adopt the running app"
fi
get web | grep -q "node pid" || fail "the node app is not served after the restart"

step "apt-get remove slipway"
apt-get remove -y slipway
systemctl is-active --quiet slipway.service && fail "slipway.service still runs"
systemctl is-active --quiet slipway.socket && fail "slipway.socket still listens"
sleep 1
pgrep -f 'node server.js' && fail "the node app outlived the removal"
[ -d /var/lib/slipway ] || fail "the data was removed"
[ -f /etc/slipway/slipway.toml ] || fail "the config was removed by remove (only purge removes it)"

step "apt-get purge slipway"
apt-get purge -y slipway | tee /tmp/purge
[ ! -e /etc/slipway ] || fail "/etc/slipway is still there after purge"
[ -f /var/lib/slipway/slipway.redb ] || fail "purge deleted the data"
grep -q "your data is kept in /var/lib/slipway" /tmp/purge || fail "purge did not say where the data is"
echo "E2E PASSED"

if [ -f /e2e/it_binary ]; then
  it="$(cat /e2e/it_binary)"
  step "integration tests '$(cat /e2e/it_filter)' under the unit's properties"
  mkdir -p /srv/slipway-tests
  set --
  while IFS= read -r property; do set -- "$@" -p "$property"; done </e2e/unit_properties
  skips=""
  for name in $(cat /e2e/it_skip); do skips="$skips --skip $name"; done
  # The test binaries sit at their build path, which may be under /tmp (a fresh clone): the
  # unit's PrivateTmp would hide them, so that one directory is bound in read-only. Nothing
  # else of the unit's properties changes.
  debug_dir="$(dirname "$(dirname "$it")")"
  systemd-run --quiet --pipe --wait --collect "$@" -p ReadWritePaths=/srv/slipway-tests \
    -p "BindReadOnlyPaths=$debug_dir" \
    -E TMPDIR=/srv/slipway-tests -E PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    -E HOME=/srv/slipway-tests \
    "$it" "$(cat /e2e/it_filter)" --test-threads=2 $skips || { echo "INTEGRATION TESTS UNDER THE UNIT FAILED (exit $?)"; exit 1; }
  echo "INTEGRATION TESTS UNDER THE UNIT PASSED"
fi
