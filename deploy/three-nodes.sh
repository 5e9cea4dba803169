#!/usr/bin/env bash
# three-nodes.sh starts and stops a three-node fencelock cluster on this
# machine, on ports that do not collide with the quick start's single node
# (7070/7071) or the fenced store (7080):
#
#   bash deploy/three-nodes.sh up DIR     start n1..n3 with their data and logs under DIR
#   bash deploy/three-nodes.sh down DIR   stop exactly the nodes "up DIR" started
#
# APIs on 127.0.0.1:7271-7273, Raft on 127.0.0.1:7371-7373 (FENCELOCK_PORT_BASE=N
# moves them to N+71.. and N+171..). The binary is "fencelock" on PATH, or
# FENCELOCK_BIN. "up" waits for a ready leader and prints the line to export
# for the client commands.
set -euo pipefail
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bin=${FENCELOCK_BIN:-fencelock}
base=${FENCELOCK_PORT_BASE:-7200}
api() { echo "127.0.0.1:$((base + 70 + $1))"; }
raft() { echo "127.0.0.1:$((base + 170 + $1))"; }

case $cmd in
up)
	command -v "$bin" >/dev/null || { echo "three-nodes.sh: $bin not found: go install ./cmd/fencelock, or set FENCELOCK_BIN" >&2; exit 1; }
	mkdir -p "$dir"
	boot="n1=$(raft 1),n2=$(raft 2),n3=$(raft 3)"
	for i in 1 2 3; do
		"$bin" serve --node-id "n$i" --listen "$(api "$i")" --raft-addr "$(raft "$i")" \
			--data-dir "$dir/n$i" --bootstrap "$boot" >"$dir/n$i.log" 2>&1 &
		echo $! >"$dir/n$i.pid"
	done
	servers="$(api 1),$(api 2),$(api 3)"
	for _ in $(seq 1 300); do
		for i in 1 2 3; do
			if curl -fsS -o /dev/null "http://$(api "$i")/readyz?leader" 2>/dev/null; then
				echo "three-nodes.sh: cluster up (logs in $dir/n*.log); for the client commands:" >&2
				echo "export FENCELOCK_SERVER=$servers"
				exit 0
			fi
		done
		sleep 0.1
	done
	echo "three-nodes.sh: no ready leader within 30 s; see $dir/n*.log" >&2
	exit 1
	;;
down)
	for f in "$dir"/n?.pid; do
		[ -e "$f" ] || continue
		kill "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
	;;
*)
	echo "three-nodes.sh: unknown command $cmd (up or down)" >&2
	exit 2
	;;
esac
