#!/usr/bin/env bash
# Static sites under one memory budget: SITES static sites of SITE_MB each (50 files of
# incompressible data, an index.html and a 1 KiB hot file) deployed on a daemon with
# `limits.static_cache_mb = BUDGET_MB`. Reports the daemon's RSS before and after (goal:
# ≤ budget + 64 MiB), checks that every site answers with its own index, and measures the
# hot 1 KiB file's req/s with wrk (-t1 -c64) on this daemon against a daemon serving one
# site (goal ≥ 0.9×), plus a file past the budget served from disk. Release binary, temp data
# dirs, loopback only; needs about SITES × SITE_MB × 2 of disk.
#
#   bash benches/static_memory.sh                    # 1,000 sites × 5 MB on 256 MiB
#   SITES=100 bash benches/static_memory.sh          # quicker
set -euo pipefail
cd "$(dirname "$0")/.."
SITES="${SITES:-1000}"
SITE_MB="${SITE_MB:-5}"
BUDGET_MB="${BUDGET_MB:-256}"
DURATION="${DURATION:-5s}"
command -v wrk > /dev/null || { echo "needs wrk (apt-get install wrk)"; exit 1; }
cargo build --release --quiet
BIN="$PWD/target/release/slipway"
WORK="$(mktemp -d)"
. benches/lib.sh
trap 'bench_stop_daemons; rm -rf "$WORK"' EXIT

# One daemon in $WORK/$1 with the budget; its pid in $WORK/$1/pid.
start() {
  bench_daemon "$WORK/$1" none "[limits]
static_cache_mb = $BUDGET_MB"
  echo "$DAEMON_PID" > "$WORK/$1/pid"
}

# The site: 50 files of SITE_MB/50 random bytes, an index and a 1 KiB hot file.
mkdir -p "$WORK/site/media"
for i in $(seq 50); do head -c $((SITE_MB * 1024 * 1024 / 50)) /dev/urandom > "$WORK/site/media/$i.bin"; done
head -c 1024 /dev/zero | tr '\0' 'h' > "$WORK/site/hot.txt"
tar czf "$WORK/site.tgz" -C "$WORK/site" .

start many
start one
rss() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$(cat "$WORK/$1/pid")/status"; }
RSS_BEFORE="$(rss many)"

python3 - "$WORK" "$SITES" <<'PY'
import concurrent.futures, json, sys, time, urllib.request
work, sites = sys.argv[1], int(sys.argv[2])
def daemon(name):
    addr = open(f"{work}/{name}/out").read().split("listening http ")[1].split()[0]
    token = open(f"{work}/{name}/data/initial-admin-token").read().strip()
    return addr, token
archive = open(f"{work}/site.tgz", "rb").read()
def call(addr, token, method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(f"http://{addr}/api{path}", method=method, data=body,
        headers={"Authorization": "Bearer " + token, "Host": "slipway.localhost", "Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)
def deploy(addr, token, slug):
    call(addr, token, "POST", f"/projects/{slug}/source", archive, "application/gzip")
    index = f"<h1>{slug}</h1>".encode()
    body = json.dumps({"projectSlug": slug, "buildCommand": f"printf '%s' '{index.decode()}' > index.html"}).encode()
    started = call(addr, token, "POST", f"/projects/{slug}/provision", body)
    while True:
        status = call(addr, token, "GET", f"/provisioning/{started['provisioningId']}/status")
        if status["status"] != "provisioning_in_progress":
            break
        time.sleep(0.05)
    assert status["status"] == "provisioning_complete", status
def answers(addr, slug):
    req = urllib.request.Request(f"http://{addr}/", headers={"Host": f"{slug}.localhost"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read() == f"<h1>{slug}</h1>".encode()
t0 = time.time()
addr, token = daemon("many")
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    list(pool.map(lambda i: deploy(addr, token, f"site{i}"), range(sites)))
print(f"deployed {sites} sites in {time.time() - t0:.0f} s", flush=True)
bad = [i for i in range(sites) if not answers(addr, f"site{i}")]
print(f"sites answering with their own index: {sites - len(bad)} of {sites}")
assert not bad, bad[:10]
# Make half of every site's media hot (8 requests each to 25 files): promotions fill the
# budget's second half, so the RSS below is the most the budget lets the daemon hold.
def warm(i):
    for n in range(1, 26):
        for _ in range(8):
            req = urllib.request.Request(f"http://{addr}/media/{n}.bin", headers={"Host": f"site{i}.localhost"})
            with urllib.request.urlopen(req, timeout=30) as r:
                r.read()
t0 = time.time()
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    list(pool.map(warm, range(sites)))
print(f"made 25 files of each site hot in {time.time() - t0:.0f} s", flush=True)
one_addr, one_token = daemon("one")
deploy(one_addr, one_token, "site0")
open(f"{work}/addrs", "w").write(f"{addr} {one_addr}\n")
PY
read -r MANY ONE < "$WORK/addrs"
RSS_AFTER="$(rss many)"
rate() { wrk -t1 -c64 -d"$DURATION" -H "Host: $2.localhost" "http://$1$3" | awk '/Requests\/sec/ {print $2}'; }
HOT_ONE="$(rate "$ONE" site0 /hot.txt)"
HOT_MANY="$(rate "$MANY" "site$((SITES - 1))" /hot.txt)"
DISK_MANY="$(rate "$MANY" "site$((SITES - 1))" /media/50.bin)"
RSS_LOADED="$(rss many)"
echo
echo "$SITES static sites × $SITE_MB MB, limits.static_cache_mb = $BUDGET_MB"
echo "| figure | value |"
echo "|---|---:|"
echo "| RSS at start (MiB) | $RSS_BEFORE |"
echo "| RSS with every site deployed and 25 files of each hot (MiB) | $RSS_AFTER |"
echo "| RSS after the wrk runs (MiB) | $RSS_LOADED |"
echo "| goal: budget + 64 (MiB) | $((BUDGET_MB + 64)) |"
echo "| hot 1 KiB file, daemon with 1 site (req/s) | $HOT_ONE |"
echo "| hot 1 KiB file, last of $SITES sites (req/s) | $HOT_MANY |"
python3 -c "print('| ratio (goal ≥ 0.9) | %.3f |' % ($HOT_MANY / $HOT_ONE))"
echo "| $((SITE_MB * 1024 / 50)) KiB file from disk, last site (req/s) | $DISK_MANY |"
