#!/usr/bin/env bash
# Add-ons (issue 34): for PostgreSQL 15 and Redis, the time from POST …/addons to the 201
# (which comes once the server accepts connections; goal ≤ 2 s for PostgreSQL), and the idle
# memory of each (PSS of every process of its sandbox, from /proc/PID/smaps_rollup; goal
# ≤ 25 MB); then a PostgreSQL database of about SCALE × 15 MB (pgbench -i -s SCALE: 68 ≈ 1 GB)
# backed up and proven (pg_dump in the counted snapshot, then the throw-away restore and its
# counts): the time until the backup is `ok`, and its size. Namespaces mode (needs root).
# Loopback and sandbox addresses only.
#
#   bash benches/addons.sh                              # release build, SCALE=68 (≈ 1 GB)
#   SCALE=5 BIN=target/debug/slipway bash benches/addons.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${SCALE:-68}
[ "$(id -u)" = 0 ] || { echo "SKIP: add-ons run in namespaces mode, which needs root" >&2; exit 0; }
for tool in python3 curl pgbench; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 0; }
done
for program in /usr/lib/postgresql/15/bin/postgres /usr/bin/redis-server; do
    [ -x "$program" ] || { echo "SKIP: $program is not installed (postgresql-15, redis-server)" >&2; exit 0; }
done
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet --bin slipway
    BIN="$PWD/target/release/slipway"
fi
WORK="$(mktemp -d /var/tmp/slipway-addons.XXXXXX)"
. benches/lib.sh
cleanup() {
    bench_stop_daemons
    "$BIN" stop-apps --config "$WORK/daemon/slipway.toml" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

BENCH_SANDBOX_TOML="instance = \"adn$$\"
subnet = \"10.$((220 + RANDOM % 30)).$((RANDOM % 256)).0/24\"" \
    bench_daemon "$WORK/daemon" namespaces
python3 - "$DAEMON_ADDR" "$DAEMON_TOKEN" "$SCALE" "$BIN" <<'PY'
import glob, subprocess, sys, time
sys.dont_write_bytecode = True
sys.path.insert(0, "benches")
from bench_api import Api
addr, token, scale, binary = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
api = Api("http://%s/api" % addr, token)
api.call("POST", "/projects", {"slug": "bench-addons"})

def pss_mb(addon_id):
    """PSS of every process whose cgroup names the add-on."""
    total = 0
    for path in glob.glob("/proc/[0-9]*/cgroup"):
        try:
            if addon_id not in open(path).read():
                continue
            for line in open(path.replace("cgroup", "smaps_rollup")):
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024

print("add-ons: %s, sandbox namespaces" % binary)
ids = {}
for kind, body in [("postgres", {"kind": "postgres", "memoryMb": 512, "diskMb": 4096}),
                   ("redis", {"kind": "redis", "memoryMb": 256})]:
    times = []
    for n in range(3):
        began = time.monotonic()
        addon = api.call("POST", "/projects/bench-addons/addons", dict(body, envName="BENCH_%s_%d" % (kind.upper(), n)))
        times.append((time.monotonic() - began) * 1000)
        ids.setdefault(kind, addon["id"])
    time.sleep(5)
    print("%-8s POST → 201 (accepting connections): %s ms; idle PSS %.1f MB"
          % (kind, " / ".join("%.0f" % t for t in times), pss_mb(ids[kind])))

pg = ids["postgres"]
url = api.call("GET", "/addons/%s/credentials" % pg)["url"]
began = time.monotonic()
subprocess.run(["pgbench", "-i", "-q", "-s", str(scale), url], check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
size = api.call("GET", "/addons/%s" % pg)["diskUsedBytes"]
print("loaded pgbench -s %d in %.0f s: %.0f MB used on the add-on's volume"
      % (scale, time.monotonic() - began, size / 1e6))
began = time.monotonic()
backup = api.call("POST", "/addons/%s/backups" % pg)
dumped = None
while backup["state"] in ("running", "verifying"):
    time.sleep(0.5)
    backup = api.call("GET", "/addons/%s/backups/%s" % (pg, backup["id"]))
    if backup["state"] == "verifying" and dumped is None:
        dumped = time.monotonic() - began
total = time.monotonic() - began
print("backup + verify: %s in %.1f s (dump %.1f s, proof %.1f s); %.0f MB; %s"
      % (backup["state"], total, dumped or 0, total - (dumped or 0), backup["bytes"] / 1e6,
         backup.get("check") or backup.get("error")))
PY
