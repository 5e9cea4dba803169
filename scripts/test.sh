#!/usr/bin/env bash
# Runs every fencelock test on this machine, from nothing: installs and starts
# throwaway PostgreSQL and Redis servers on loopback (scripts/services.sh),
# installs Debian's chromium and chromium-driver if missing (the dashboard's
# test drives a real headless Chromium), vets, runs the whole suite with the
# race detector (unit tests, real-process server and cluster fault tests, the
# demo, the verify scenarios), runs the Python client's tests (Debian's python3
# and its pytest, psycopg, psycopg2 and redis packages, installed with apt-get
# if missing), tests the bench/ module and smoke-runs the benchmarks against
# etcd and Redis, and stops every server it started.
#
#   bash scripts/test.sh            # extra args go to "go test", e.g. -run Server
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo /root/go)/bin"

command -v go >/dev/null || { echo "test.sh: go is not installed (need Go 1.26+)" >&2; exit 1; }

svcdir="$(mktemp -d -t fencelock-services-XXXXXX)"
cleanup() { bash scripts/services.sh down "$svcdir" || true; rm -rf "$svcdir"; }
trap cleanup EXIT
# Assigned first, so that a failed start stops this script (set -e).
services_env="$(bash scripts/services.sh up "$svcdir")"
eval "$services_env"

# The dashboard's test drives a real headless Chromium.
if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
	[ "$(id -u)" -eq 0 ] || { echo "test.sh: install chromium and chromium-driver (the dashboard test needs them)" >&2; exit 1; }
	echo "== installing chromium and chromium-driver" >&2
	apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver >&2
fi

echo "== go vet" >&2
go vet ./...
echo "== go test -race" >&2
# The test of 40,000 waits judges how fast an unrelated lock answers (within
# 1 s): it runs alone after the others, whose processes would otherwise
# take the node's processor on a small machine.
alone='^TestServer_WaitsOfKilledClientsAreTakenBack$'
go test -race -count=1 -timeout 20m -skip "$alone" "$@" ./...
go test -race -count=1 -timeout 5m -run "$alone" "$@" ./server/
# Under -race, rawio makes Go's ordinary system calls; its raw ones are
# tested here (and used by every node process the tests start).
go test -count=1 "$@" ./internal/rawio/
# The Go client builds for macOS and Windows too (rawio leaves their
# connections as they are).
GOOS=darwin go build ./client/
GOOS=windows go build ./client/
echo "== python: pytest against real nodes, PostgreSQL and Redis" >&2
py=/usr/bin/python3
if ! "$py" -c 'import pytest, psycopg, psycopg2, redis' 2>/dev/null; then
	[ "$(id -u)" -eq 0 ] || { echo "test.sh: install python3-pytest python3-psycopg python3-psycopg2 python3-redis" >&2; exit 1; }
	apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		python3 python3-pytest python3-psycopg python3-psycopg2 python3-redis python3-venv python3-setuptools python3-pip >&2
fi
go build -o "$svcdir/fencelock" ./cmd/fencelock
CI="${CI:-1}" FENCELOCK_BIN="$svcdir/fencelock" "$py" -m pytest -q -p no:cacheprovider python/tests
# The package installs from its directory without a package index.
cp -rL python "$svcdir/python-src"
"$py" -m venv --system-site-packages "$svcdir/venv"
"$svcdir/venv/bin/pip" install -q --no-build-isolation --no-index "$svcdir/python-src"
(cd "$svcdir" && venv/bin/python -c 'import fencelock.redis, fencelock.postgres, fencelock.store; assert fencelock.redis._SCRIPT')
echo "== bench module: vet and tests" >&2
(cd bench && go vet ./... && go test -race -count=1 ./...)
echo "== benchmark smoke runs (numbers are not checked)" >&2
go test -run '^$' -bench 'AcquireRelease|Renew|ApplyInProcess' -benchtime 64x ./server/
bash bench/run.sh --smoke --out "$svcdir/bench-smoke.md"
