#!/usr/bin/env bash
# App start time (issue 29 §4): from the deployment's system log line "deploy: web=1 × $ <command>"
# (the web type's start; the line said "deploy: $ <command>" before process types) to
# "app is accepting connections", both written by the daemon with millisecond times, for
# RUNS deployments each of a Node and a Python hello-world, provisioned through the API of a
# release daemon in sandbox mode namespaces (as root) and in mode none. Next to them, the same
# apps started as plain processes on the host with a connect loop (every 2 ms) on their port.
# Prints p50/p95/max per app and mode. Loopback only.
#
#   bash benches/app_start.sh                         # 30 deployments per app and mode
#   RUNS=10 MODES=namespaces bash benches/app_start.sh
#   BIN=target/debug/slipway RUNS=5 bash benches/app_start.sh   # a quick look, no release build
#   SAMPLES=/tmp/starts.tsv bash benches/app_start.sh   # also keep every sample (app, mode, ms)
#   BENCH_SUBNET=10.231.78.0/24 bash benches/app_start.sh   # the namespaced daemon's /24, fixed
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-30}"
MODES="${MODES:-namespaces none}"
if [ "$(id -u)" != 0 ]; then
    echo "not root: the namespaces mode is left out" >&2
    MODES="${MODES//namespaces/}"
fi
for tool in python3 node; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet --bin slipway
    BIN="$PWD/target/release/slipway"
fi
# Under /var/tmp: the sandbox mounts a private /tmp, which would hide a data dir under /tmp.
WORK="$(mktemp -d /var/tmp/slipway-app-start.XXXXXX)"
. benches/lib.sh
cleanup() {
    for dir in "$WORK"/daemon-*; do
        [ -f "$dir/slipway.toml" ] || continue
        kill "$(cat "$dir/pid")" 2>/dev/null || true
        wait "$(cat "$dir/pid")" 2>/dev/null || true
        # Apps outlive a daemon that stops: stop them and what their sandboxes hold.
        "$BIN" stop-apps --config "$dir/slipway.toml" >/dev/null 2>&1 || true
    done
    bench_stop_daemons
    rm -rf "$WORK"
}
trap cleanup EXIT

bench_hello_apps "$WORK"

RESULTS="$WORK/results"
for mode in $MODES; do
    dir="$WORK/daemon-$mode"
    BENCH_SANDBOX_TOML="instance = \"appstart$$\"
subnet = \"${BENCH_SUBNET:-10.$((220 + RANDOM % 30)).$((RANDOM % 256)).0/24}\"" \
        bench_daemon "$dir" "$mode"
    echo "$DAEMON_PID" >"$dir/pid"
    python3 - "$DAEMON_ADDR" "$DAEMON_TOKEN" "$RUNS" "$mode" "$WORK" >>"$RESULTS" <<'PY'
import datetime, sys
sys.dont_write_bytecode = True
sys.path.insert(0, "benches")
from bench_api import Api
addr, token, runs, mode, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
api = Api("http://%s/api" % addr, token)
def at(line):
    return datetime.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()
for app, command in [("node", "node server.js"), ("python", "python3 server.py")]:
    slug = "start-" + app
    api.call("POST", "/projects/%s/source" % slug, open("%s/%s.tgz" % (work, app), "rb").read(), "application/gzip")
    for _ in range(runs):
        status = api.provision(slug, {"startCommand": command, "installCommand": "true", "buildCommand": "true"})
        logs = api.call("GET", "/deployments/%s/logs?stream=system&limit=1000" % status["deploymentId"])["logs"]
        deploy = next(at(l) for l in logs if l["message"].startswith("deploy: web=") and " × $ " in l["message"])
        ready = next(at(l) for l in logs if l["message"].startswith("app is accepting connections"))
        print("%s\t%s\t%.0f" % (app, mode, (ready - deploy) * 1000))
PY
done

# The same apps as plain processes on the host: spawn → first accepted connection.
python3 - "$RUNS" "$WORK" >>"$RESULTS" <<'PY'
import socket, subprocess, sys, time
runs, work = int(sys.argv[1]), sys.argv[2]
for app, argv in [("node", ["node", "server.js"]), ("python", ["python3", "server.py"])]:
    for _ in range(runs):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        started = time.perf_counter()
        process = subprocess.Popen(argv, cwd="%s/%s" % (work, app), env={"PATH": "/usr/local/bin:/usr/bin:/bin", "PORT": str(port)})
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.002)
        print("%s\tplain process\t%.0f" % (app, (time.perf_counter() - started) * 1000))
        process.terminate()
        process.wait()
PY

[ -n "${SAMPLES:-}" ] && cp "$RESULTS" "$SAMPLES"
python3 - "$RESULTS" "$RUNS" <<'PY'
import collections, sys
samples = collections.defaultdict(list)
for line in open(sys.argv[1]):
    app, mode, ms = line.rstrip("\n").split("\t")
    samples[(app, mode)].append(float(ms))
def pick(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]
print("app start, deploy: web=1 × $ … → accepting connections (ms), %s runs each" % sys.argv[2])
print("| app | started by | p50 | p95 | max | runs over 900 ms |")
print("|---|---|---:|---:|---:|---:|")
for (app, mode), values in samples.items():
    label = mode if mode == "plain process" else "daemon, sandbox " + mode
    print("| %s | %s | %.0f | %.0f | %.0f | %d |" % (app, label, pick(values, 0.5), pick(values, 0.95),
          max(values), sum(v > 900 for v in values)))
PY
