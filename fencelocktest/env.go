package fencelocktest

import (
	"os"
	"testing"
)

// Environment variables naming the servers tests run against. scripts/services.sh
// prints them, ready for eval.
const (
	// EnvPostgresDSN holds a PostgreSQL connection string, e.g.
	// postgres://postgres@127.0.0.1:15432/postgres?sslmode=disable.
	EnvPostgresDSN = "FENCELOCK_TEST_POSTGRES_DSN"
	// EnvRedisAddr holds a Redis address, e.g. 127.0.0.1:16379.
	EnvRedisAddr = "FENCELOCK_TEST_REDIS_ADDR"
	// EnvMySQLDSN holds a MySQL or MariaDB data source name for
	// github.com/go-sql-driver/mysql, e.g. root@tcp(127.0.0.1:13306)/.
	EnvMySQLDSN = "FENCELOCK_TEST_MYSQL_DSN"
	// EnvS3Endpoint holds the URL of an S3-compatible server, e.g.
	// http://127.0.0.1:17070; its keys are in AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY.
	EnvS3Endpoint = "FENCELOCK_TEST_S3_ENDPOINT"
	// EnvCI, when non-empty, turns a missing server into a test failure:
	// in CI every test must run.
	EnvCI = "CI"
)

// PostgresDSN returns the connection string of the PostgreSQL server tests may
// use (from FENCELOCK_TEST_POSTGRES_DSN). When it is unset, it skips tb with
// a message saying how to start one, or fails tb if CI is set.
func PostgresDSN(tb testing.TB) string {
	tb.Helper()
	return fromEnv(tb, EnvPostgresDSN, "a PostgreSQL server")
}

// RedisAddr returns the address of the Redis server tests may use (from
// FENCELOCK_TEST_REDIS_ADDR). When it is unset, it skips tb with a message
// saying how to start one, or fails tb if CI is set.
func RedisAddr(tb testing.TB) string {
	tb.Helper()
	return fromEnv(tb, EnvRedisAddr, "a Redis server")
}

// MySQLDSN returns the data source name of the MySQL or MariaDB server
// tests may use (from FENCELOCK_TEST_MYSQL_DSN). When it is unset, it skips
// tb with a message saying how to start one, or fails tb if CI is set.
func MySQLDSN(tb testing.TB) string {
	tb.Helper()
	return fromEnv(tb, EnvMySQLDSN, "a MySQL or MariaDB server")
}

// S3Endpoint returns the URL of the S3-compatible server tests may use
// (from FENCELOCK_TEST_S3_ENDPOINT). When it is unset, it skips tb with a
// message saying how to start one, or fails tb if CI is set.
func S3Endpoint(tb testing.TB) string {
	tb.Helper()
	return fromEnv(tb, EnvS3Endpoint, "an S3-compatible server")
}

func fromEnv(tb testing.TB, name, server string) string {
	tb.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	msg := "this test needs " + server + " and " + name + " is not set. " +
		"Start throwaway servers with:\n\tdir=$(mktemp -d); eval \"$(bash scripts/services.sh up \"$dir\")\"\n" +
		"then run the tests again, and stop them with: bash scripts/services.sh down \"$dir\""
	if os.Getenv(EnvCI) != "" {
		tb.Fatal("CI is set, so tests needing servers must run, but " + msg)
		return ""
	}
	tb.Skip("skipping: " + msg)
	return ""
}
