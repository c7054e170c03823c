#!/usr/bin/env bash
# Memory of sleeping apps (issue 35): PROJECTS hello-world apps (Python by default, APP=node for
# Node) deployed on a release daemon in sandbox mode namespaces (as root), measured running, then
# all put to sleep (`POST …/sleep`) and measured again. Reports the daemon's RSS and PSS
# (/proc/PID/smaps_rollup) and the apps' cgroups (how many, and the sum of their
# memory.current, or memory.usage_in_bytes with cgroup v1). Bounded: every wait has a deadline, PARALLEL deploys at once. Loopback only.
#
#   bash benches/sleep_memory.sh                      # 100 Python apps
#   PROJECTS=20 APP=node bash benches/sleep_memory.sh
#   BIN=target/debug/slipway PROJECTS=10 bash benches/sleep_memory.sh   # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
PROJECTS="${PROJECTS:-100}"
PARALLEL="${PARALLEL:-2}"
APP="${APP:-python}"
[ "$(id -u)" = 0 ] || { echo "needs root: the apps' cgroups are what is measured" >&2; exit 1; }
command -v "$([ "$APP" = node ] && echo node || echo python3)" >/dev/null || { echo "needs $APP" >&2; exit 1; }
. benches/lib.sh
bench_bin
WORK="$(mktemp -d /var/tmp/slipway-sleep-memory.XXXXXX)"
INSTANCE="sleepmem$$"
trap 'bench_cleanup "$WORK/daemon"' EXIT
bench_hello_apps "$WORK"
COMMAND="python3 server.py"
[ "$APP" = node ] && COMMAND="node server.js"

BENCH_SANDBOX_TOML="instance = \"$INSTANCE\"
subnet = \"${BENCH_SUBNET:-10.$((220 + RANDOM % 30)).$((RANDOM % 64 * 4)).0/22}\"" \
    bench_daemon "$WORK/daemon" namespaces "[limits]
app_memory_mb = 64
max_concurrent_builds = $PARALLEL"
python3 - "$DAEMON_ADDR" "$DAEMON_TOKEN" "$DAEMON_PID" "$PROJECTS" "$PARALLEL" "$COMMAND" "$WORK" "$INSTANCE" "$APP" <<'PY'
import concurrent.futures, glob, os, sys, time
sys.dont_write_bytecode = True
sys.path.insert(0, "benches")
from bench_api import Api
addr, token, pid, projects, parallel, command, work, instance, app = sys.argv[1:10]
pid, projects, parallel = int(pid), int(projects), int(parallel)
api = Api("http://%s/api" % addr, token)
source = open("%s/%s.tgz" % (work, app), "rb").read()

def deploy(slug, deadline=120):
    api.call("POST", "/projects/%s/source" % slug, source, "application/gzip")
    body = {"startCommand": command, "installCommand": "true", "buildCommand": "true", "projectSlug": slug}
    run = api.call("POST", "/projects/%s/provision" % slug, body)["provisioningId"]
    until = time.time() + deadline
    while time.time() < until:
        status = api.call("GET", "/provisioning/%s/status" % run)
        if status["status"] != "provisioning_in_progress":
            assert status["status"] == "provisioning_complete", status
            return
        time.sleep(0.2)
    raise SystemExit("%s did not deploy within %d s" % (slug, deadline))

def daemon_kib():
    fields = {}
    for line in open("/proc/%d/smaps_rollup" % pid):
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss"):
            fields[name] = int(rest.split()[0])
    return fields["Rss"], fields["Pss"]

def app_cgroups():
    # The apps' cgroups: slipway-dpl_…-app-… right under this daemon's instance, in every
    # hierarchy (cgroup v1 has one per controller); memory from the one that counts it.
    names, total = set(), 0
    for path in glob.glob("/sys/fs/cgroup/**/%s/slipway-dpl_*-app*" % instance, recursive=True):
        names.add(os.path.basename(path))
        for name in ("memory.current", "memory.usage_in_bytes"):
            try:
                total += int(open(os.path.join(path, name)).read())
                break
            except OSError:
                pass
    return len(names), total

def measure(label):
    time.sleep(5)  # let exits, page-cache writeback and the allocator settle
    rss, pss = daemon_kib()
    count, memory = app_cgroups()
    return (label, rss, pss, count, memory)

slugs = ["mem-%03d" % i for i in range(projects)]
started = time.time()
with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
    list(pool.map(deploy, slugs))
print("deployed %d %s apps in %.0f s" % (projects, app, time.time() - started), file=sys.stderr)
rows = [measure("%d running" % projects)]
started = time.time()
for slug in slugs:
    state = api.call("POST", "/projects/%s/sleep" % slug)["appState"]
    assert state == "sleeping", (slug, state)
print("put %d apps to sleep in %.0f s" % (projects, time.time() - started), file=sys.stderr)
rows.append(measure("%d sleeping" % projects))
print("memory of %d %s hello-world apps, running vs sleeping (sandbox namespaces)" % (projects, app))
print("| apps | daemon RSS (MiB) | daemon PSS (MiB) | app cgroups | apps' memory.current (MiB) |")
print("|---|---:|---:|---:|---:|")
for label, rss, pss, count, memory in rows:
    print("| %s | %.1f | %.1f | %d | %.1f |" % (label, rss / 1024, pss / 1024, count, memory / 2**20))
PY
