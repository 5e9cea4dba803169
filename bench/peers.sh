#!/usr/bin/env bash
# peers.sh up DIR   installs (only if missing) and starts the benchmark's peers on
#                   loopback, with throwaway data under DIR:
#                     etcd (single node, default fsync)  client 127.0.0.1:23791, peer :23801
#                       (ETCD_NODES=3 or 5: that many members, clients :23791.., peers :23801..)
#                     redis, no persistence              127.0.0.1:63791
#                     redis, appendonly + fsync always   127.0.0.1:63792
#                   It writes DIR/peers.env (addresses) and one DIR/NAME.pid per process.
# peers.sh down DIR stops exactly the processes whose pid files are in DIR (after
#                   checking each pid is still the program it started) and removes DIR.
#
# Ports can be changed with ETCD_PORT, ETCD_PEER_PORT, REDIS_NOPERSIST_PORT, REDIS_AOF_PORT.
# Every wait is bounded; nothing listens on anything but 127.0.0.1.
set -euo pipefail

ETCD_NODES=${ETCD_NODES:-1}
ETCD_PORT=${ETCD_PORT:-23791}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23801}
REDIS_NOPERSIST_PORT=${REDIS_NOPERSIST_PORT:-63791}
REDIS_AOF_PORT=${REDIS_AOF_PORT:-63792}

usage() { echo "usage: $0 up|down DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$2

log() { echo "peers: $*" >&2; }

install_missing() {
	local need=()
	command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
	command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
	command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
	[ ${#need[@]} -eq 0 ] && return 0
	log "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -q --no-install-recommends "${need[@]}" >&2
}

# port_free PORT: nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start NAME CMD...: runs CMD in the background, logs to DIR/NAME.log, pid in DIR/NAME.pid.
start() {
	local name=$1
	shift
	"$@" >"$dir/$name.log" 2>&1 &
	echo $! >"$dir/$name.pid"
	log "started $name (pid $!)"
}

# wait_for NAME CHECK...: polls CHECK every 0.1 s for at most 20 s.
wait_for() {
	local name=$1
	shift
	for _ in $(seq 1 200); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		if ! kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then
			log "$name exited; its log:"
			tail -20 "$dir/$name.log" >&2
			return 1
		fi
		sleep 0.1
	done
	log "$name not ready after 20 s; its log:"
	tail -20 "$dir/$name.log" >&2
	return 1
}

up() {
	install_missing
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	local etcd_names=() cluster="" addrs="" i
	if [ "$ETCD_NODES" -eq 1 ]; then
		etcd_names=(etcd)
	else
		for i in $(seq 1 "$ETCD_NODES"); do etcd_names+=("etcd-$i"); done
	fi
	for i in "${!etcd_names[@]}"; do
		port_free $((ETCD_PORT + i)) || { log "port $((ETCD_PORT + i)) is already in use on 127.0.0.1; set ETCD_PORT"; exit 1; }
		port_free $((ETCD_PEER_PORT + i)) || { log "port $((ETCD_PEER_PORT + i)) is already in use on 127.0.0.1; set ETCD_PEER_PORT"; exit 1; }
		cluster+="${cluster:+,}${etcd_names[$i]}=http://127.0.0.1:$((ETCD_PEER_PORT + i))"
		addrs+="${addrs:+,}127.0.0.1:$((ETCD_PORT + i))"
	done
	for p in "$REDIS_NOPERSIST_PORT" "$REDIS_AOF_PORT"; do
		port_free "$p" || { log "port $p is already in use on 127.0.0.1; set the *_PORT variables"; exit 1; }
	done
	mkdir -p "$dir/redis-nopersist" "$dir/redis-aof"

	for i in "${!etcd_names[@]}"; do
		local name=${etcd_names[$i]} cport=$((ETCD_PORT + i)) pport=$((ETCD_PEER_PORT + i))
		mkdir -p "$dir/$name"
		start "$name" etcd --name "$name" --data-dir "$dir/$name" \
			--listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
			--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
			--initial-cluster "$cluster" --initial-cluster-state new \
			--logger zap --log-level warn
	done
	start redis-nopersist redis-server --bind 127.0.0.1 --port "$REDIS_NOPERSIST_PORT" --dir "$dir/redis-nopersist" \
		--save '' --appendonly no --daemonize no --protected-mode yes --logfile ''
	start redis-aof redis-server --bind 127.0.0.1 --port "$REDIS_AOF_PORT" --dir "$dir/redis-aof" \
		--save '' --appendonly yes --appendfsync always --daemonize no --protected-mode yes --logfile ''

	for i in "${!etcd_names[@]}"; do
		wait_for "${etcd_names[$i]}" curl -fsS "http://127.0.0.1:$((ETCD_PORT + i))/health"
	done
	wait_for redis-nopersist redis-cli -h 127.0.0.1 -p "$REDIS_NOPERSIST_PORT" ping
	wait_for redis-aof redis-cli -h 127.0.0.1 -p "$REDIS_AOF_PORT" ping
	[ "$(redis-cli -h 127.0.0.1 -p "$REDIS_AOF_PORT" config get appendfsync | tail -1)" = always ] ||
		{ log "redis-aof is not fsync-always"; exit 1; }

	cat >"$dir/peers.env" <<EOF
ETCD_ADDR=$addrs
REDIS_NOPERSIST_ADDR=127.0.0.1:$REDIS_NOPERSIST_PORT
REDIS_AOF_ADDR=127.0.0.1:$REDIS_AOF_PORT
EOF
	log "up: $(tr '\n' ' ' <"$dir/peers.env")"
}

# stop NAME PROGRAM: ends the pid in DIR/NAME.pid if it is still PROGRAM.
stop() {
	local name=$1 prog=$2 pidf="$dir/$1.pid" pid
	[ -f "$pidf" ] || return 0
	pid=$(cat "$pidf")
	if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$prog"; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "$name (pid $pid) ignored TERM for 10 s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		log "stopped $name (pid $pid)"
	else
		log "$name (pid $pid) is not running"
	fi
	rm -f "$pidf"
}

down() {
	[ -d "$dir" ] || { log "$dir does not exist; nothing to stop"; return 0; }
	local f
	for f in "$dir"/etcd*.pid; do
		if [ -e "$f" ]; then stop "$(basename "$f" .pid)" etcd; fi
	done
	stop redis-nopersist redis-server
	stop redis-aof redis-server
	rm -rf "$dir"/etcd "$dir"/etcd-* "$dir/redis-nopersist" "$dir/redis-aof" "$dir/peers.env" "$dir"/*.log
	rmdir "$dir" 2>/dev/null || true
}

case $cmd in
up) up ;;
down) down ;;
*) usage ;;
esac
