#!/usr/bin/env bash
# What 1,000 custom domains cost the router (issue 11): two release daemons side by side on
# loopback, each with the same 20 static projects (a 1 KiB page); daemon A has 1 custom
# domain, daemon B has 1,000 (50 per project, the most allowed). wrk asks both for the same
# name (d0.example.test) in interleaved rounds; the table shows req/s and p99 of each round
# and the ratio B/A of the medians. Goal: B ≥ 0.95 × A.
#
# Needs: wrk, curl, python3, cargo. Loopback only; the daemons are stopped on exit.
#
#   benches/domains.sh                       # wrk -t1 -c64 -d10s, 3 rounds
#   DURATION=5s ROUNDS=2 benches/domains.sh
set -euo pipefail

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-3}
REPO=$(cd "$(dirname "$0")/.." && pwd)

for tool in wrk curl python3 cargo; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 0; }
done

WORK=$(mktemp -d /tmp/slipway-domains-bench.XXXXXX)
. "$REPO/benches/lib.sh"
trap 'bench_stop_daemons; rm -rf "$WORK"' EXIT

echo "building slipway (release)..." >&2
(cd "$REPO" && cargo build --release --locked --bin slipway >&2)
BIN="$REPO/target/release/slipway"

mkdir -p "$WORK/site/public"
python3 -c 'print("<!doctype html><title>bench</title>" + "x" * 980)' >"$WORK/site/public/index.html"
tar -czf "$WORK/site.tgz" -C "$WORK/site" public

# Projects and domains through the API (python: one keep-alive connection, fast).
setup() { # name, domains per project
    local D="$WORK/$1"
    python3 - "$D" "$2" "$WORK/site.tgz" <<'PY'
import http.client, json, sys, time
d, per_project, archive = sys.argv[1], int(sys.argv[2]), sys.argv[3]
addr = next(l.split()[-1] for l in open(f"{d}/out") if l.startswith("listening http "))
host, port = addr.rsplit(":", 1)
token = open(f"{d}/data/initial-admin-token").read().strip()
conn = http.client.HTTPConnection(host, int(port), timeout=60)
def api(method, path, body=None, content_type="application/json"):
    headers = {"Authorization": f"Bearer {token}", "Host": "slipway.localhost"}
    if body is not None:
        headers["Content-Type"] = content_type
        if content_type == "application/json":
            body = json.dumps(body)
    conn.request(method, "/api" + path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.status >= 300:
        sys.exit(f"{method} {path}: {response.status} {data[:300]!r}")
    return json.loads(data)
site = open(archive, "rb").read()
n = 0
for p in range(20):
    slug = f"site{p}"
    api("POST", "/projects", {"slug": slug})
    api("POST", f"/projects/{slug}/source", site, "application/gzip")
    run = api("POST", f"/projects/{slug}/provision", {"projectSlug": slug, "installCommand": "", "buildCommand": ""})
    for _ in range(600):
        status = api("GET", f"/provisioning/{run['provisioningId']}/status")
        if status["status"] != "provisioning_in_progress":
            break
        time.sleep(0.1)
    if status["status"] != "provisioning_complete":
        sys.exit(f"{slug}: {status}")
    # A: one domain in all (on site0); B: per_project on every site.
    count = per_project if per_project > 1 or p == 0 else 0
    for _ in range(count):
        api("POST", f"/projects/{slug}/domains", {"domain": f"d{n}.example.test"})
        n += 1
print(addr)
print(n, file=sys.stderr)
PY
}

bench_daemon "$WORK/one"
bench_daemon "$WORK/many"
ADDR_ONE=$(setup one 1 2>"$WORK/one.count")
ADDR_MANY=$(setup many 50 2>"$WORK/many.count")
echo "daemon A: $(cat "$WORK/one.count") custom domain(s); daemon B: $(cat "$WORK/many.count")" >&2
for addr in "$ADDR_ONE" "$ADDR_MANY"; do
    body=$(curl -sS --fail -H "Host: d0.example.test" "http://$addr/")
    [ "${#body}" -gt 1000 ] || { echo "d0.example.test is not served at $addr" >&2; exit 1; }
done

measure() { # addr → "req/s p99_ms"
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -H "Host: d0.example.test" "http://$1/" |
        python3 -c '
import re, sys
text = sys.stdin.read()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
m = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)
p99 = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
if errors: sys.exit(f"{errors.group(1)} failed responses")
print(f"{rps:.0f} {p99:.2f}")'
}

echo "round  target              req/s     p99 ms"
ONE=(); MANY=()
for round in $(seq 1 "$ROUNDS"); do
    read -r rps p99 <<<"$(measure "$ADDR_ONE")"; ONE+=("$rps")
    printf '%-6s %-18s %9s %9s\n' "$round" "1 domain" "$rps" "$p99"
    read -r rps p99 <<<"$(measure "$ADDR_MANY")"; MANY+=("$rps")
    printf '%-6s %-18s %9s %9s\n' "$round" "1000 domains" "$rps" "$p99"
done
python3 - "${ONE[*]}" "${MANY[*]}" <<'PY'
import statistics, sys
one = statistics.median(map(float, sys.argv[1].split()))
many = statistics.median(map(float, sys.argv[2].split()))
print(f"median req/s: 1 domain {one:.0f}, 1000 domains {many:.0f}; ratio {many / one:.3f} (goal ≥ 0.95)")
PY
