package fencelocktest

import (
	"os"
	"strings"
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
	return fromEnv(tb, EnvPostgresDSN, "PostgreSQL")
}

// RedisAddr returns the address of the Redis server tests may use (from
// FENCELOCK_TEST_REDIS_ADDR). When it is unset, it skips tb with a message
// saying how to start one, or fails tb if CI is set.
func RedisAddr(tb testing.TB) string {
	tb.Helper()
	return fromEnv(tb, EnvRedisAddr, "Redis")
}

// S3Endpoint returns the URL of the S3-compatible server tests may use
// (from FENCELOCK_TEST_S3_ENDPOINT). When it is unset, it skips tb with a
// message saying how to start one, or fails tb if CI is set.
func S3Endpoint(tb testing.TB) string {
	tb.Helper()
	return fromEnv(tb, EnvS3Endpoint, "S3-compatible")
}

func fromEnv(tb testing.TB, name, server string) string {
	tb.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	msg := "this test needs " + article(server) + " " + server + " server and " + name + " is not set. " +
		"Start throwaway servers with:\n\tdir=$(mktemp -d); eval \"$(bash scripts/services.sh up \"$dir\")\"\n" +
		"then run the tests again, and stop them with: bash scripts/services.sh down \"$dir\""
	if os.Getenv(EnvCI) != "" {
		tb.Fatal("CI is set, so tests needing servers must run, but " + msg)
		return ""
	}
	tb.Skip("skipping: " + msg)
	return ""
}

func article(word string) string {
	if strings.ContainsRune("AEIOUS", rune(word[0])) { // S: "an S3"
		return "an"
	}
	return "a"
}
