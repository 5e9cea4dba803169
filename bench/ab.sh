#!/usr/bin/env bash
# ab.sh A_DIR B_DIR [CELL...]: two builds of fencelock measured in turns on
# the same cells, for a change judged against the commit before it. Each
# DIR holds a `fencelock` and a `fencebench` built from one tree (the
# fencebench of a tree drives that tree's client). Both nodes run at once,
# one thread each, on loopback with throwaway data; each cell runs ROUNDS
# times on each, A and B taking turns (who goes first alternates). A cell is
# "SYSTEM CLIENTS LOCKS", e.g. "fencelock-perworker 64 own".
#
#   ROUNDS=3 DURATION=4s bench/ab.sh /tmp/new /tmp/old "fencelock 1 own" "fencelock 64 own"
#
# Prints a markdown table: each side's median pairs/s, their ratio A/B, and
# the median of the node's CPU per pair (user + system, from /proc: Linux).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
a=$1 b=$2
shift 2
cells=("$@")
[ ${#cells[@]} -gt 0 ] || cells=("fencelock 1 own" "fencelock 64 own" "fencelock 64 one" "fencelock-perworker 64 own")
rounds=${ROUNDS:-3} duration=${DURATION:-4s}
work=$(mktemp -d "${TMPDIR:-/tmp}/fencelock-ab.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# start DIR PORT: a one-node cluster of DIR's fencelock on PORT (Raft on PORT+1).
start() {
	mkdir -p "$work/$2"
	"$1/fencelock" serve --listen "127.0.0.1:$2" --raft-addr "127.0.0.1:$(($2 + 1))" --data-dir "$work/$2" \
		--log-level warn --procs 1 >"$work/$2.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		curl -fs "http://127.0.0.1:$2/readyz?leader" >/dev/null 2>&1 && return
		sleep 0.1
	done
	echo "ab: the node of $1 did not become ready; its log: $work/$2.log" >&2
	exit 1
}
start "$a" 17271
start "$b" 17371
pid_a=${pids[0]} pid_b=${pids[1]}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# measure DIR PORT PID CELL: prints "pairs/s node-µs-per-pair".
measure() {
	local before after out pps secs
	read -r sys n locks <<<"$4"
	before=$(ticks "$3")
	secs=$(date +%s%N)
	out=$("$1/fencebench" --fencelock-addr "127.0.0.1:$2" --systems "$sys" --clients "$n" --locks "$locks" \
		--hold 0 --duration "$duration" --warmup 300ms --runs 1 --out "$work/out.md" 2>&1) ||
		{ echo "ab: fencebench of $1 failed: $out" >&2; exit 1; }
	after=$(ticks "$3")
	secs=$((($(date +%s%N) - secs) / 1000000))
	pps=$(grep -oE '[0-9]+ pairs/s' <<<"$out" | tail -1 | cut -d' ' -f1)
	awk -v p="$pps" -v t=$((after - before)) -v hz="$hz" -v s="$secs" 'BEGIN { printf "%d %.1f\n", p, t / hz * 1e6 / (p * s / 1000 + 1) }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "| cell | A pairs/s | B pairs/s | A/B | A node µs/pair | B node µs/pair | A runs | B runs |"
echo "|---|---:|---:|---:|---:|---:|---|---|"
for cell in "${cells[@]}"; do
	ra=() rb=() ca=() cb=()
	for r in $(seq "$rounds"); do
		echo "ab: $cell, round $r of $rounds" >&2
		for side in $( ((r % 2)) && echo "a b" || echo "b a"); do
			if [ "$side" = a ]; then
				read -r p c <<<"$(measure "$a" 17271 "$pid_a" "$cell")"
				ra+=("$p") ca+=("$c")
			else
				read -r p c <<<"$(measure "$b" 17371 "$pid_b" "$cell")"
				rb+=("$p") cb+=("$c")
			fi
		done
	done
	ma=$(printf '%s\n' "${ra[@]}" | median) mb=$(printf '%s\n' "${rb[@]}" | median)
	echo "| $cell | $ma | $mb | $(awk -v x="$ma" -v y="$mb" 'BEGIN { printf "%.2f", x / y }') |" \
		"$(printf '%s\n' "${ca[@]}" | median) | $(printf '%s\n' "${cb[@]}" | median) |" \
		"$(
			IFS=/
			echo "${ra[*]}"
		) | $(
			IFS=/
			echo "${rb[*]}"
		) |"
done
