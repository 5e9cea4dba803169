#!/usr/bin/env bash
# services.sh starts and stops the throwaway PostgreSQL, Redis, MariaDB and
# S3-compatible (versitygw) servers that fencelock's adapter tests run against.
#
#   bash scripts/services.sh up [DIR]   install (if missing) and start the servers
#                                       with their data under DIR (default: a new
#                                       temp dir); print export lines on stdout
#   bash scripts/services.sh down DIR   stop exactly the servers `up DIR` started
#
# Typical use:
#   dir=$(mktemp -d)
#   eval "$(bash scripts/services.sh up "$dir")"
#   go test -race ./...
#   bash scripts/services.sh down "$dir"
#
# The servers listen on 127.0.0.1 only, on non-default ports below Linux's
# ephemeral range (PostgreSQL from 15432, Redis from 16379, MariaDB from 13306,
# S3 from 17070; the next free port is taken if one is busy; override the start
# with FENCELOCK_PG_PORT / FENCELOCK_REDIS_PORT / FENCELOCK_MYSQL_PORT /
# FENCELOCK_S3_PORT). Missing binaries are installed with apt-get (Debian's
# postgresql, redis-server and mariadb-server packages), which needs root; versitygw (Apache-2.0, posix backend) is built once with
# `go install` from the Go module proxy into FENCELOCK_TOOLS_DIR (default
# ~/.cache/fencelock). As root, PostgreSQL runs as the `postgres` OS user and
# MariaDB as `mysql`; MariaDB skips its grant tables (any user, no password).
# Progress goes to stderr; stdout carries only the export lines.
set -euo pipefail

exec 3>&1 1>&2 # stdout (fd 3) is reserved for the export lines

log() { printf 'services.sh: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

pg_bindir() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
		printf '%s\n' "$d"
	fi
}

install_missing() {
	local pkgs=()
	[ -n "$(pg_bindir)" ] || pkgs+=(postgresql)
	command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
	[ -x /usr/sbin/mariadbd ] || pkgs+=(mariadb-server)
	[ ${#pkgs[@]} -eq 0 ] && return 0
	[ "$(id -u)" -eq 0 ] || die "${pkgs[*]} not installed and not running as root; install them with: sudo apt-get install -y ${pkgs[*]}"
	log "installing ${pkgs[*]} with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${pkgs[@]}"
	[ -n "$(pg_bindir)" ] || die "postgresql installed, but no initdb under /usr/lib/postgresql/*/bin"
	command -v redis-server >/dev/null 2>&1 || die "redis-server installed, but not on PATH"
	[ -x /usr/sbin/mariadbd ] || die "mariadb-server installed, but no /usr/sbin/mariadbd"
}

port_busy() { (exec 4<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
	local port=$1 last=$(($1 + 50))
	while port_busy "$port"; do
		port=$((port + 1))
		[ "$port" -le "$last" ] || die "no free port in $1..$last"
	done
	printf '%s\n' "$port"
}

# as_pg runs a command as the PostgreSQL OS user (postgres when we are root).
as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

redis_ping() {
	local port=$1 reply
	if command -v redis-cli >/dev/null 2>&1; then
		[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]
		return
	fi
	exec 5<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null || return 1
	printf 'PING\r\n' >&5
	read -r -t 2 reply <&5 || true
	exec 5<&-
	[ "${reply%$'\r'}" = +PONG ]
}

start_mariadb() {
	local dir=$1 port user=()
	if [ "$(id -u)" -eq 0 ]; then
		id mysql >/dev/null 2>&1 || die "OS user mysql does not exist (Debian's mariadb-server package creates it)"
		chown mysql: "$dir/mysql"
		user=(--user=mysql)
	fi
	log "initializing MariaDB in $dir/mysql/data"
	mariadb-install-db --no-defaults "${user[@]}" --datadir="$dir/mysql/data" --skip-test-db \
		--auth-root-authentication-method=normal >"$dir/mysql/install.log" 2>&1 3>&- ||
		die "mariadb-install-db failed, see $dir/mysql/install.log"
	port=$(free_port "${FENCELOCK_MYSQL_PORT:-13306}")
	log "starting MariaDB on 127.0.0.1:$port"
	/usr/sbin/mariadbd --no-defaults "${user[@]}" --datadir="$dir/mysql/data" --port="$port" \
		--bind-address=127.0.0.1 --socket="$dir/mysql/sock" --pid-file="$dir/mysql/mariadb.pid" \
		--skip-grant-tables --innodb-flush-log-at-trx-commit=2 --log-error="$dir/mysql/error.log" \
		>/dev/null 2>&1 3>&- &
	printf 'MYSQL_PORT=%q\nMYSQL_PID=%q\n' "$port" "$!" >>"$dir/services.env"
	local i
	for i in $(seq 1 200); do
		port_busy "$port" && return 0
		sleep 0.1
	done
	die "MariaDB does not accept connections on 127.0.0.1:$port, see $dir/mysql/error.log"
}

VERSITYGW_VERSION=v1.8.0
S3_ACCESS_KEY=fencelock
S3_SECRET_KEY=fencelock-test-secret

# versitygw_bin prints the path of the versitygw binary, building it first if
# it is missing.
versitygw_bin() {
	local cache=${FENCELOCK_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fencelock}
	local bin="$cache/versitygw-$VERSITYGW_VERSION"
	if [ ! -x "$bin" ]; then
		command -v go >/dev/null 2>&1 || die "go is needed to build versitygw"
		log "building versitygw $VERSITYGW_VERSION into $cache (once; about two minutes)"
		mkdir -p "$cache/build"
		GOFLAGS= GOBIN="$cache/build" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2 3>&- ||
			die "could not build versitygw"
		mv "$cache/build/versitygw" "$bin"
	fi
	printf '%s\n' "$bin"
}

start_s3() {
	local dir=$1 bin port
	bin=$(versitygw_bin)
	port=$(free_port "${FENCELOCK_S3_PORT:-17070}")
	log "starting versitygw (S3) on 127.0.0.1:$port"
	"$bin" --port "127.0.0.1:$port" --access "$S3_ACCESS_KEY" --secret "$S3_SECRET_KEY" --quiet \
		posix "$dir/s3/root" >"$dir/s3/versitygw.log" 2>&1 3>&- &
	printf 'S3_PORT=%q\nS3_PID=%q\n' "$port" "$!" >>"$dir/services.env"
	local i
	for i in $(seq 1 100); do
		port_busy "$port" && return 0
		sleep 0.1
	done
	die "versitygw does not accept connections on 127.0.0.1:$port, see $dir/s3/versitygw.log"
}

print_exports() {
	# shellcheck disable=SC1091
	. "$1/services.env"
	printf "export FENCELOCK_TEST_POSTGRES_DSN='postgres://postgres@127.0.0.1:%s/postgres?sslmode=disable'\n" "$PG_PORT" >&3
	printf "export FENCELOCK_TEST_REDIS_ADDR='127.0.0.1:%s'\n" "$REDIS_PORT" >&3
	printf "export FENCELOCK_TEST_MYSQL_DSN='root@tcp(127.0.0.1:%s)/'\n" "$MYSQL_PORT" >&3
	printf "export FENCELOCK_TEST_S3_ENDPOINT='http://127.0.0.1:%s'\n" "$S3_PORT" >&3
	printf "export AWS_ACCESS_KEY_ID='%s' AWS_SECRET_ACCESS_KEY='%s' AWS_REGION=us-east-1\n" "$S3_ACCESS_KEY" "$S3_SECRET_KEY" >&3
	printf "export FENCELOCK_SERVICES_DIR='%s'\n" "$1" >&3
}

start_postgres() {
	local dir=$1 bindir port
	bindir=$(pg_bindir)
	if [ "$(id -u)" -eq 0 ]; then
		id postgres >/dev/null 2>&1 || die "OS user postgres does not exist (Debian's postgresql package creates it)"
		chown postgres: "$dir/pg"
		as_pg test -w "$dir/pg" || die "user postgres cannot write $dir/pg; choose a DIR every user can traverse (e.g. under /tmp)"
	fi
	log "initializing PostgreSQL ($bindir) in $dir/pg/data"
	as_pg "$bindir/initdb" -D "$dir/pg/data" -U postgres --auth=trust -E UTF8 --no-locale >"$dir/pg/initdb.log" 2>&1 ||
		die "initdb failed, see $dir/pg/initdb.log"
	local attempt next=${FENCELOCK_PG_PORT:-15432}
	for attempt in 1 2 3; do
		port=$(free_port "$next")
		log "starting PostgreSQL on 127.0.0.1:$port"
		printf 'PG_BINDIR=%q\nPG_PORT=%q\n' "$bindir" "$port" >>"$dir/services.env" # before start: down must find it
		if as_pg "$bindir/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/postgres.log" -w -t 60 start \
			-o "-p $port -c listen_addresses=127.0.0.1 -k $dir/pg -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >/dev/null 3>&-; then
			break
		fi
		log "PostgreSQL did not start (attempt $attempt); its log ends with:"
		tail -n 15 "$dir/pg/postgres.log" >&2 || true
		[ "$attempt" -lt 3 ] || die "PostgreSQL did not start, see above"
		next=$((port + 1))
	done
	local i
	for i in $(seq 1 100); do
		as_pg "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" && return 0
		sleep 0.1
	done
	die "PostgreSQL does not accept connections on 127.0.0.1:$port, see $dir/pg/postgres.log"
}

start_redis() {
	local dir=$1 port
	port=$(free_port "${FENCELOCK_REDIS_PORT:-16379}")
	log "starting Redis on 127.0.0.1:$port"
	redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/redis" --daemonize yes \
		--pidfile "$dir/redis/redis.pid" --logfile "$dir/redis/redis.log" \
		--appendonly yes --appendfsync everysec --save '' >/dev/null 3>&- ||
		die "redis-server did not start, see $dir/redis/redis.log"
	printf 'REDIS_PORT=%q\n' "$port" >>"$dir/services.env"
	local i
	for i in $(seq 1 100); do
		if [ -s "$dir/redis/redis.pid" ] && redis_ping "$port"; then
			printf 'REDIS_PID=%q\n' "$(cat "$dir/redis/redis.pid")" >>"$dir/services.env"
			return 0
		fi
		sleep 0.1
	done
	die "Redis does not answer PING on 127.0.0.1:$port, see $dir/redis/redis.log"
}

up() {
	local dir=${1:-}
	if [ -z "$dir" ]; then
		dir=$(mktemp -d -t fencelock-services.XXXXXX)
	fi
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	if [ -f "$dir/services.env" ]; then
		die "$dir already holds servers started by services.sh; stop them with: bash $0 down $dir"
	fi
	install_missing
	chmod 755 "$dir"
	mkdir -p "$dir/pg" "$dir/redis" "$dir/mysql" "$dir/s3/root"
	: >"$dir/services.env"
	trap 'log "start failed; stopping what was started"; down "$dir" || true' EXIT
	start_postgres "$dir"
	start_redis "$dir"
	start_mariadb "$dir"
	start_s3 "$dir"
	trap - EXIT
	log "PostgreSQL, Redis, MariaDB and S3 are up; stop them with: bash $0 down $dir"
	print_exports "$dir"
}

# stop_pid NAME COMMAND PORT PID stops PID if it still runs COMMAND, and
# waits up to 10 s for it to exit.
stop_pid() {
	local name=$1 cmd=$2 port=$3 pid=$4 i
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q "$cmd" "/proc/$pid/cmdline" 2>/dev/null || return 0
	log "stopping $name on port $port (pid $pid)"
	kill "$pid"
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
}

down() {
	local dir=${1:-}
	[ -n "$dir" ] || die "down needs the DIR given to (or printed by) up"
	[ -f "$dir/services.env" ] || die "$dir has no services.env: nothing started there by services.sh"
	local PG_BINDIR='' PG_PORT='' REDIS_PORT='' REDIS_PID='' MYSQL_PORT='' MYSQL_PID='' S3_PORT='' S3_PID=''
	# shellcheck disable=SC1091
	. "$dir/services.env"
	if [ -z "$REDIS_PID" ] && [ -n "$REDIS_PORT" ] && [ -s "$dir/redis/redis.pid" ]; then
		REDIS_PID=$(cat "$dir/redis/redis.pid") # started, but up failed before recording it
	fi
	if [ -n "$PG_BINDIR" ] && [ -f "$dir/pg/data/postmaster.pid" ]; then
		log "stopping PostgreSQL on port $PG_PORT"
		as_pg "$PG_BINDIR/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null || log "pg_ctl stop failed"
	fi
	stop_pid Redis redis-server "$REDIS_PORT" "$REDIS_PID"
	stop_pid MariaDB mariadbd "$MYSQL_PORT" "$MYSQL_PID"
	stop_pid versitygw versitygw "$S3_PORT" "$S3_PID"
	rm -f "$dir/services.env"
}

case "${1:-}" in
up) up "${2:-}" ;;
down) down "${2:-}" ;;
-h | --help | help) usage >&3 ;;
*)
	usage
	die "unknown command '${1:-}'; use up or down"
	;;
esac
