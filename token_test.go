package fencelock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		what  string
		check func() error
		want  error // nil: accepted
	}{
		{"a name", func() error { return fencelock.LockName("jobs/nightly-ä").Validate() }, nil},
		{"an empty name", func() error { return fencelock.LockName("").Validate() }, fencelock.ErrInvalidName},
		{"a name over the limit", func() error { return fencelock.LockName(strings.Repeat("n", fencelock.MaxNameLen+1)).Validate() }, fencelock.ErrInvalidName},
		{"a name that is not UTF-8", func() error { return fencelock.LockName("a\xff").Validate() }, fencelock.ErrInvalidName},
		{"a name with NUL", func() error { return fencelock.LockName("a\x00").Validate() }, fencelock.ErrInvalidName},
		{"a name with DEL", func() error { return fencelock.LockName("a\x7f").Validate() }, fencelock.ErrInvalidName},
		{"a name with a C1 control (NEL)", func() error { return fencelock.LockName("a\u0085b").Validate() }, fencelock.ErrInvalidName},
		{"a name with a C1 control (CSI)", func() error { return fencelock.LockName("a\u009b2J").Validate() }, fencelock.ErrInvalidName},
		{"a holder label", func() error { return fencelock.ValidateHolder("worker-7 on host a") }, nil},
		{"an empty holder label", func() error { return fencelock.ValidateHolder("") }, nil},
		{"a holder label over the limit", func() error { return fencelock.ValidateHolder(strings.Repeat("h", fencelock.MaxHolderLen+1)) }, fencelock.ErrInvalidArgument},
		{"a holder label with an escape", func() error { return fencelock.ValidateHolder("\x1b[2J") }, fencelock.ErrInvalidArgument},
		{"a holder label that is not UTF-8", func() error { return fencelock.ValidateHolder("\xff") }, fencelock.ErrInvalidArgument},
		{"a request id", func() error { return fencelock.ValidateRequestID("job-42/attempt-1") }, nil},
		{"an empty request id", func() error { return fencelock.ValidateRequestID("") }, fencelock.ErrInvalidArgument},
		{"a request id with a zero byte", func() error { return fencelock.ValidateRequestID("a\x00b") }, fencelock.ErrInvalidArgument},
		{"a request id over the limit", func() error { return fencelock.ValidateRequestID(strings.Repeat("r", fencelock.MaxRequestIDLen+1)) }, fencelock.ErrInvalidArgument},
		{"a new lease id", func() error { return fencelock.NewLeaseID().Validate() }, nil},
		{"a lease id in capitals", func() error { return fencelock.LeaseID(strings.Repeat("AF09", 8)).Validate() }, nil},
		{"a short lease id", func() error { return fencelock.LeaseID(strings.Repeat("a", 31)).Validate() }, fencelock.ErrInvalidArgument},
		{"a long lease id", func() error { return fencelock.LeaseID(strings.Repeat("a", 33)).Validate() }, fencelock.ErrInvalidArgument},
		{"a lease id with a letter past f", func() error { return fencelock.LeaseID(strings.Repeat("a", 31) + "g").Validate() }, fencelock.ErrInvalidArgument},
		{"a lease id with a character before 0", func() error { return fencelock.LeaseID("/" + strings.Repeat("a", 31)).Validate() }, fencelock.ErrInvalidArgument},
		{"a lease id with a character after 9", func() error {
			return fencelock.LeaseID(strings.Repeat("a", 16) + ":" + strings.Repeat("a", 15)).Validate()
		}, fencelock.ErrInvalidArgument},
	}
	for _, tt := range tests {
		err := tt.check()
		if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("%s: %v, want %v", tt.what, err, tt.want)
		}
	}
}
