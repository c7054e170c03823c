#!/usr/bin/env bash
# Cron fire time (issue 33): JOBS cron jobs due every minute (`* * * * *`, command `true`) in
# one project, for MINUTES minutes of the real clock; then, over every run, how long after its
# due time (`scheduledAt`) the scheduler recorded it (`createdAt`: the fire time) and its
# sandbox had started the command (`startedAt`). Prints p50, p99 and max of both (goal: the
# fire time's p99 ≤ 1 s). Namespaces mode when run as root, else mode none. Loopback only.
#
#   bash benches/cron_fire.sh                          # release build, 60 jobs × 5 minutes = 300 runs
#   JOBS=20 MINUTES=2 BIN=target/debug/slipway bash benches/cron_fire.sh
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-60}
MINUTES=${MINUTES:-5}
for tool in python3 curl; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 0; }
done
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet --bin slipway
    BIN="$PWD/target/release/slipway"
fi
MODE=none
[ "$(id -u)" = 0 ] && MODE=namespaces
WORK="$(mktemp -d /var/tmp/slipway-cron.XXXXXX)"
. benches/lib.sh
cleanup() {
    bench_stop_daemons
    "$BIN" stop-apps --config "$WORK/daemon/slipway.toml" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/app"
echo hi >"$WORK/app/index.html"
tar czf "$WORK/app.tgz" -C "$WORK/app" .
BENCH_SANDBOX_TOML="instance = \"cron$$\"
subnet = \"10.$((220 + RANDOM % 30)).$((RANDOM % 256)).0/24\"" \
    bench_daemon "$WORK/daemon" "$MODE"
python3 - "$DAEMON_ADDR" "$DAEMON_TOKEN" "$WORK/app.tgz" "$JOBS" "$MINUTES" "$MODE" "$BIN" <<'PY'
import sys, time
from datetime import datetime
sys.dont_write_bytecode = True
sys.path.insert(0, "benches")
from bench_api import Api
addr, token, archive, jobs, minutes, mode, binary = sys.argv[1:8]
jobs, minutes = int(jobs), int(minutes)
api = Api("http://%s/api" % addr, token)
api.call("POST", "/projects/bench-cron/source", open(archive, "rb").read(), "application/gzip")
api.provision("bench-cron", {"startCommand": "exec python3 -m http.server $PORT",
                             "installCommand": "true", "buildCommand": "true"})
for n in range(jobs):
    api.call("POST", "/projects/bench-cron/cron-jobs",
             {"name": "job-%03d" % n, "schedule": "* * * * *", "command": "true"})
# From the next minute on, MINUTES due times; then a margin for the last runs to start.
now = time.time()
first_due = (int(now) // 60 + 1) * 60
time.sleep(first_due + 60 * (minutes - 1) + 20 - now)
runs = api.call("GET", "/projects/bench-cron/runs?limit=1000")["runs"]
def ms(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000
fired = sorted(ms(r["createdAt"]) - ms(r["scheduledAt"]) for r in runs if r["scheduledAt"])
started = sorted(ms(r["startedAt"]) - ms(r["scheduledAt"]) for r in runs if r["startedAt"] and r["scheduledAt"])
states = {}
for r in runs:
    states[r["state"]] = states.get(r["state"], 0) + 1
def pct(values, p):
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")
print("cron fire time: %d jobs '* * * * *' × %d minutes, sandbox %s, %s" % (jobs, minutes, mode, binary))
print("runs: %d (%s)" % (len(runs), ", ".join("%s %d" % kv for kv in sorted(states.items()))))
print("fired after the due time (createdAt - scheduledAt): p50 %.0f ms, p99 %.0f ms, max %.0f ms"
      % (pct(fired, 0.5), pct(fired, 0.99), fired[-1] if fired else float("nan")))
print("command started (startedAt - scheduledAt):          p50 %.0f ms, p99 %.0f ms, max %.0f ms"
      % (pct(started, 0.5), pct(started, 0.99), started[-1] if started else float("nan")))
PY
