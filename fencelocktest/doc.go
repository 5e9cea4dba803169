// Package fencelocktest is fencelock's importable test kit.
//
// RunFenceSuite runs the shared cases of package conformance against any fence adapter, so
// every resource (the memory fence, the object store over HTTP, PostgreSQL,
// Redis, or your own) is held to the same definition of fencing. PostgresDSN
// and RedisAddr find the throwaway servers that scripts/services.sh starts,
// and skip (or, in CI, fail) the test when there are none. StartStore serves
// a fenced object store on loopback for one test, StartNode a lock
// service node, in the test's process, with its API on loopback, and
// StartCluster a cluster of such nodes, one of which a test may stop.
//
// It is meant for _test.go files only; production code must not import it.
package fencelocktest
