package fencelocktest

import (
	"strings"
	"testing"
)

// recordingTB records Skip and Fatal instead of stopping the test.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper()           {}
func (r *recordingTB) Skip(args ...any)  { r.skipped = args[0].(string) }
func (r *recordingTB) Fatal(args ...any) { r.fatal = args[0].(string) }

func TestPostgresDSN(t *testing.T) {
	tests := []struct {
		name, dsn, ci         string
		want                  string
		wantSkip, wantFailure bool
	}{
		{name: "set", dsn: "postgres://x", want: "postgres://x"},
		{name: "set in CI", dsn: "postgres://x", ci: "true", want: "postgres://x"},
		{name: "unset", wantSkip: true},
		{name: "unset in CI", ci: "1", wantFailure: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvPostgresDSN, tt.dsn)
			t.Setenv(EnvCI, tt.ci)
			rec := &recordingTB{TB: t}
			got := PostgresDSN(rec)
			if got != tt.want || (rec.skipped != "") != tt.wantSkip || (rec.fatal != "") != tt.wantFailure {
				t.Fatalf("PostgresDSN = %q, skipped %q, failed %q; want %q, skip %v, failure %v",
					got, rec.skipped, rec.fatal, tt.want, tt.wantSkip, tt.wantFailure)
			}
			if msg := rec.skipped + rec.fatal; msg != "" && !strings.Contains(msg, "scripts/services.sh up") {
				t.Fatalf("message %q does not say how to start the servers", msg)
			}
		})
	}
}

func TestRedisAddr(t *testing.T) {
	t.Setenv(EnvRedisAddr, "127.0.0.1:1")
	if got := RedisAddr(t); got != "127.0.0.1:1" {
		t.Fatalf("RedisAddr = %q, want %q", got, "127.0.0.1:1")
	}
}
