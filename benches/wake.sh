#!/usr/bin/env bash
# Wake latency of sleeping apps (issue 35): for a Node and a Python hello-world on a daemon in
# sandbox mode namespaces (as root; mode none otherwise), WAKES times: `POST …/sleep`, then one
# GET to the app's host, timed from sending it to the whole answer — what the first visitor
# after a sleep waits. Next to it, the same apps' start inside the daemon (a deployment's
# "deploy: web=1 × $ …" → "app is accepting connections" log lines, STARTS deploys) and as plain
# processes on the host (spawn → first accepted connection). Prints p50/p99/max. Loopback only.
#
#   bash benches/wake.sh                                  # 50 wakes, 5 deploys per app
#   BIN=target/debug/slipway WAKES=50 bash benches/wake.sh   # no release build
set -euo pipefail
cd "$(dirname "$0")/.."
WAKES="${WAKES:-50}"
STARTS="${STARTS:-5}"
MODE=namespaces
[ "$(id -u)" = 0 ] || { echo "not root: sandbox mode none" >&2; MODE=none; }
for tool in python3 node; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
. benches/lib.sh
bench_bin
WORK="$(mktemp -d /var/tmp/slipway-wake.XXXXXX)"
trap 'bench_cleanup "$WORK/daemon"' EXIT
bench_hello_apps "$WORK"

BENCH_SANDBOX_TOML="instance = \"wake$$\"
subnet = \"${BENCH_SUBNET:-10.$((220 + RANDOM % 30)).$((RANDOM % 256)).0/24}\"" \
    bench_daemon "$WORK/daemon" "$MODE" "[sleep]
tick_ms = 100"
python3 - "$DAEMON_ADDR" "$DAEMON_TOKEN" "$WAKES" "$STARTS" "$MODE" "$WORK" <<'PY'
import datetime, http.client, socket, subprocess, sys, time
sys.dont_write_bytecode = True
sys.path.insert(0, "benches")
from bench_api import Api
addr, token, wakes, starts, mode, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
api = Api("http://%s/api" % addr, token)
host, port = addr.rsplit(":", 1)

def at(line):
    return datetime.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()

def get(slug):
    started = time.perf_counter()
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    connection.request("GET", "/", headers={"Host": "%s.localhost" % slug})
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    assert answer.status == 200 and body == b"hello\n", (answer.status, body)
    return (time.perf_counter() - started) * 1000

def plain(app, argv):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd="%s/%s" % (work, app), env={"PATH": "/usr/local/bin:/usr/bin:/bin", "PORT": str(free)})
    while True:
        try:
            socket.create_connection(("127.0.0.1", free), timeout=1).close()
            break
        except OSError:
            time.sleep(0.002)
    elapsed = (time.perf_counter() - started) * 1000
    process.terminate()
    process.wait()
    return elapsed

def pick(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]

rows = []
for app, command, argv in [("node", "node server.js", ["node", "server.js"]), ("python", "python3 server.py", ["python3", "server.py"])]:
    slug = "wake-" + app
    api.call("POST", "/projects/%s/source" % slug, open("%s/%s.tgz" % (work, app), "rb").read(), "application/gzip")
    in_daemon = []
    for _ in range(starts):
        status = api.provision(slug, {"startCommand": command, "installCommand": "true", "buildCommand": "true"})
        logs = api.call("GET", "/deployments/%s/logs?stream=system&limit=1000" % status["deploymentId"])["logs"]
        deploy = next(at(l) for l in logs if l["message"].startswith("deploy: web=") and " × $ " in l["message"])
        ready = next(at(l) for l in logs if "app is accepting connections" in l["message"])
        in_daemon.append((ready - deploy) * 1000)
    get(slug)
    woken = []
    for _ in range(wakes):
        api.call("POST", "/projects/%s/sleep" % slug)
        woken.append(get(slug))
    rows.append((app, "wake: first request after a sleep", woken))
    rows.append((app, "start in the daemon (deploy log)", in_daemon))
    rows.append((app, "plain process on the host", [plain(app, argv) for _ in range(starts)]))
print("wake latency vs start time (ms), sandbox mode %s" % mode)
print("| app | measured | n | p50 | p99 | max |")
print("|---|---|---:|---:|---:|---:|")
for app, what, values in rows:
    print("| %s | %s | %d | %.0f | %.0f | %.0f |" % (app, what, len(values), pick(values, 0.5), pick(values, 0.99), max(values)))
PY
