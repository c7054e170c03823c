#!/usr/bin/env bash
# Provisioning overhead: wall time from POST …/provision to `provisioning_complete` for a
# static project with trivial commands (median of N runs), next to the same commands run by
# plain `sh` in a fresh directory. Uses the release binary and a temp data dir; loopback only.
#
#   bash benches/provision.sh            # 20 runs, sandbox mode none
#   SANDBOX=namespaces bash benches/provision.sh   # as root: the namespace sandbox
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-20}"
SANDBOX="${SANDBOX:-none}"
cargo build --release --quiet
BIN="$PWD/target/release/slipway"
WORK="$(mktemp -d)"
. benches/lib.sh
trap 'bench_stop_daemons; rm -rf "$WORK"' EXIT

bench_daemon "$WORK" "$SANDBOX"
API="http://$DAEMON_ADDR/api"
TOKEN="$DAEMON_TOKEN"
auth=(-H "Authorization: Bearer $TOKEN" -H "Host: slipway.localhost")

INSTALL='true'
BUILD='mkdir -p dist && echo "<h1>bench</h1>" > dist/index.html'
mkdir -p "$WORK/src" && echo "bench" > "$WORK/src/README"
tar czf "$WORK/src.tgz" -C "$WORK/src" .
curl -sf "${auth[@]}" -H 'Content-Type: application/gzip' --data-binary @"$WORK/src.tgz" "$API/projects/bench/source" > /dev/null

python3 - "$API" "$TOKEN" "$RUNS" "$INSTALL" "$BUILD" "$WORK" <<'PY'
import os, shutil, statistics, subprocess, sys, time
sys.dont_write_bytecode = True
sys.path.insert(0, "benches")
from bench_api import Api
api, token, runs, install, build, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
slipway = []
for i in range(runs):
    t0 = time.perf_counter()
    Api(api, token).provision("bench", {"installCommand": install, "buildCommand": build}, poll=0.005)
    slipway.append((time.perf_counter() - t0) * 1000)
plain = []
for i in range(runs):
    d = os.path.join(work, "plain%d" % i)
    t0 = time.perf_counter()
    os.makedirs(d)
    subprocess.run(["tar", "xzf", os.path.join(work, "src.tgz"), "-C", d], check=True)
    subprocess.run(["sh", "-c", install], cwd=d, check=True)
    subprocess.run(["sh", "-c", build], cwd=d, check=True)
    plain.append((time.perf_counter() - t0) * 1000)
    shutil.rmtree(d)
ms, mp = statistics.median(slipway), statistics.median(plain)
print("provisioning, static project, trivial commands, %d runs" % runs)
print("  slipway POST→provisioning_complete  median %.1f ms  (p90 %.1f ms)" % (ms, sorted(slipway)[int(runs * 0.9) - 1]))
print("  plain sh (untar + install + build)  median %.1f ms" % mp)
print("  overhead                            %.1f ms  (%.1fx)" % (ms - mp, ms / mp))
PY
