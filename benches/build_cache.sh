#!/usr/bin/env bash
# Build cache: a Next.js app (tests/fixtures/projects/next-app, server mode, deployed with
# "framework": "auto") deployed cold, then redeployed with the same lockfile and a warm
# cache, alternating cold (DELETE …/build-cache first) and warm ROUNDS times. Reports the
# median install, build and total time of each and the warm/cold ratio (goal ≤ 0.5). Uses the
# release binary, a temp data dir and the npm registry (packages only); apps on loopback.
#
#   bash benches/build_cache.sh                      # 3 rounds, sandbox mode none
#   ROUNDS=5 SANDBOX=namespaces bash benches/build_cache.sh   # as root: in the sandbox
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-3}"
SANDBOX="${SANDBOX:-none}"
cargo build --release --quiet
BIN="$PWD/target/release/slipway"
WORK="$(mktemp -d)"
. benches/lib.sh
trap 'bench_stop_daemons; rm -rf "$WORK"' EXIT

bench_daemon "$WORK" "$SANDBOX" "[limits]
build_timeout_s = 900
health_timeout_s = 120"
ADDR="$DAEMON_ADDR"
TOKEN="$DAEMON_TOKEN"
tar czf "$WORK/src.tgz" -C tests/fixtures/projects/next-app .
curl -sf -H "Authorization: Bearer $TOKEN" -H "Host: slipway.localhost" \
  -H 'Content-Type: application/gzip' --data-binary @"$WORK/src.tgz" \
  "http://$ADDR/api/projects/next-app/source" > /dev/null

python3 - "http://$ADDR/api" "$TOKEN" "$ROUNDS" "$SANDBOX" <<'PY'
import json, statistics, sys, time, urllib.request
api, token, rounds, sandbox = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def call(method, path, body=None):
    req = urllib.request.Request(api + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Host": "slipway.localhost",
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)
def deploy():
    started = call("POST", "/projects/next-app/provision",
                   {"projectSlug": "next-app", "framework": "auto"})
    while True:
        status = call("GET", "/provisioning/%s/status" % started["provisioningId"])
        if status["status"] != "provisioning_in_progress":
            break
        time.sleep(0.2)
    assert status["status"] == "provisioning_complete", json.dumps(status)
    steps = {s["name"]: (s["durationMs"] or 0) / 1000 for s in status["steps"]}
    return steps["install"], steps["build"], status["totalDurationMs"] / 1000
runs = {"cold": [], "warm": []}
for i in range(rounds):
    call("DELETE", "/projects/next-app/build-cache")
    runs["cold"].append(deploy())
    runs["warm"].append(deploy())
    print("round %d: cold %.1f s, warm %.1f s" % (i + 1, runs["cold"][-1][2], runs["warm"][-1][2]), flush=True)
med = {k: [statistics.median(r[j] for r in v) for j in range(3)] for k, v in runs.items()}
print()
print("Next.js 16 app (fixture next-app), framework auto, sandbox %s, median of %d rounds" % (sandbox, rounds))
print("| deploy | install s | build s | total s |")
print("|---|---:|---:|---:|")
for k, label in (("cold", "first (empty build cache)"), ("warm", "redeploy (same lockfile, warm cache)")):
    print("| %s | %.1f | %.1f | %.1f |" % (label, *med[k]))
print("| warm / cold | %.2f | %.2f | %.2f |" % tuple(med["warm"][j] / med["cold"][j] for j in range(3)))
PY
