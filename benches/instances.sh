#!/usr/bin/env bash
# Several web instances (issue 32): a single-threaded, CPU-bound Node app (each request
# computes fib(FIB), about 1.5 ms of one core at the default 27) served through the daemon's router at web=1 and
# then web=2 (PATCH …/formation, the same deployment), on this machine's cores, in one run.
# Prints req/s, p50 and p99 for each and the ratio web=2 / web=1 (the goal on 2 cores: ≥ 1.8).
# Namespaces mode (each instance its own sandbox and address) when run as root, else mode
# none. Loopback only; wrk targets 127.0.0.1 with Host `bench-cpu.localhost`.
#
#   bash benches/instances.sh                       # release build, 10 s per measurement
#   DURATION=5s CONNECTIONS=16 FIB=24 bash benches/instances.sh   # lighter requests: the router's share grows
#   BIN=target/debug/slipway bash benches/instances.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-16}
FIB=${FIB:-27}
for tool in wrk node python3 curl; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 0; }
done
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet --bin slipway
    BIN="$PWD/target/release/slipway"
fi
MODE=none
[ "$(id -u)" = 0 ] && MODE=namespaces
# Under /var/tmp: the sandbox mounts a private /tmp, which would hide a data dir under /tmp.
WORK="$(mktemp -d /var/tmp/slipway-instances.XXXXXX)"
. benches/lib.sh
cleanup() {
    bench_stop_daemons
    # Apps outlive a daemon that stops: stop them and what their sandboxes hold.
    "$BIN" stop-apps --config "$WORK/daemon/slipway.toml" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/app"
printf '%s\n' \
    'const fib = (n) => (n < 2 ? n : fib(n - 1) + fib(n - 2));' \
    "require('http').createServer((req, res) => res.end(String(fib($FIB)) + '\\n')).listen(+process.env.PORT);" \
    >"$WORK/app/server.js"
tar czf "$WORK/app.tgz" -C "$WORK/app" .
BENCH_SANDBOX_TOML="instance = \"inst$$\"
subnet = \"10.$((220 + RANDOM % 30)).$((RANDOM % 256)).0/24\"" \
    bench_daemon "$WORK/daemon" "$MODE"
python3 - "$DAEMON_ADDR" "$DAEMON_TOKEN" "$WORK/app.tgz" <<'PY'
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, "benches")
from bench_api import Api
api = Api("http://%s/api" % sys.argv[1], sys.argv[2])
api.call("POST", "/projects/bench-cpu/source", open(sys.argv[3], "rb").read(), "application/gzip")
api.provision("bench-cpu", {"startCommand": "node server.js", "installCommand": "true", "buildCommand": "true"})
PY

measure() {
    curl -sf -H "Host: bench-cpu.localhost" "http://$DAEMON_ADDR/" >/dev/null
    wrk -t1 -c"$CONNECTIONS" -d1s -H "Host: bench-cpu.localhost" "http://$DAEMON_ADDR/" >/dev/null
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -H "Host: bench-cpu.localhost" \
        "http://$DAEMON_ADDR/" >"$WORK/wrk-$1"
}
scale() {
    curl -sf -X PATCH -H "Host: slipway.localhost" -H "Authorization: Bearer $DAEMON_TOKEN" \
        -H 'Content-Type: application/json' -d "{\"web\":{\"instances\":$1}}" \
        "http://$DAEMON_ADDR/api/projects/bench-cpu/formation" >/dev/null
}
measure 1
scale 2
measure 2
python3 - "$WORK" "$MODE" "$FIB" "$CONNECTIONS" "$DURATION" <<'PY'
import re, sys
work, mode, fib, connections, duration = sys.argv[1:6]
def read(n):
    text = open("%s/wrk-%s" % (work, n)).read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", text, re.M))
    bad = re.findall(r"Non-2xx or 3xx responses: \d+|Socket errors: .*", text)
    return rps, lat.get("50", "?"), lat.get("99", "?"), "; ".join(bad) or "none"
one, two = read(1), read(2)
print("CPU-bound node app (fib(%s) per request), sandbox %s, wrk -t1 -c%s -d%s" % (fib, mode, connections, duration))
print("| formation | req/s | p50 | p99 | errors |")
print("|---|---:|---:|---:|---|")
for label, row in (("web=1", one), ("web=2", two)):
    print("| %s | %.0f | %s | %s | %s |" % ((label,) + row))
print("web=2 / web=1: %.2fx req/s" % (two[0] / one[0]))
PY
