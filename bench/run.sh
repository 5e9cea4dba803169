#!/usr/bin/env bash
# run.sh [fencebench flags]: builds fencelock and fencebench from this tree,
# starts the peers (peers.sh up) under a new temporary directory, runs the
# benchmark from the current directory, and stops exactly those peers again.
#
#   bench/run.sh --smoke --out /tmp/smoke.md          # checks the harness, ~10 s
#   bench/run.sh --duration 3s --out bench-results.md  # a real run, ~2 min
#
#   bench/run.sh --nodes 3 --out bench-3nodes.md      # three fencelock nodes against three etcd members
#
# Flags: see `go run ./cmd/fencebench -h` (in bench/): --duration, --clients, --runs, --nodes,
# --locks, --out, --smoke, --systems, --ttl, --redis-retry, --redis-two-step.
# fencelock's data and the fsync probe go under the same temporary directory
# (so every server writes to the same file system); TMPDIR moves it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
work=$(mktemp -d "${TMPDIR:-/tmp}/fencebench-run.XXXXXX")
cleanup() {
	"$here/peers.sh" down "$work/peers" || true
	rm -rf "$work"
}
trap cleanup EXIT
echo "run: building fencelock and fencebench" >&2
(cd "$repo" && go build -o "$work/fencelock" ./cmd/fencelock)
(cd "$here" && go build -o "$work/fencebench" ./cmd/fencebench)
# --nodes N starts N fencelock nodes (in fencebench) and N etcd members.
nodes=1
prev=""
for a in "$@"; do
	case $a in
	--nodes=*) nodes=${a#--nodes=} ;;
	esac
	[ "$prev" = --nodes ] && nodes=$a
	prev=$a
done
ETCD_NODES=$nodes "$here/peers.sh" up "$work/peers"
"$work/fencebench" --fencelock-bin "$work/fencelock" --peers-dir "$work/peers" --work-dir "$work/data" "$@"
