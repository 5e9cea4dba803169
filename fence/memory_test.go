package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fencelocktest"
)

// memoryTarget is a MemoryResource.
func memoryTarget(tb testing.TB) fencelocktest.Target {
	return fencelocktest.Target{Resource: &fence.MemoryResource{}}
}

func TestMemory_Suite(t *testing.T) {
	fencelocktest.RunFenceSuite(t, memoryTarget)
}

func TestMemory_Do(t *testing.T) {
	errWrite := errors.New("disk full")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name        string
		ctx         context.Context
		domain      string
		token       fencelock.Token
		write       func(context.Context) error
		wantErr     error
		wantHighest fencelock.Token
		wantRan     bool
	}{
		{name: "accepted write raises highest", ctx: context.Background(), domain: "d", token: 40, wantHighest: 40, wantRan: true},
		{name: "failed write leaves highest", ctx: context.Background(), domain: "d", token: 40,
			write: func(context.Context) error { return errWrite }, wantErr: errWrite, wantHighest: 30, wantRan: true},
		{name: "stale write does not run", ctx: context.Background(), domain: "d", token: 20, wantErr: fencelock.ErrStaleToken, wantHighest: 30},
		{name: "missing token does not run", ctx: context.Background(), domain: "d", token: 0, wantErr: fencelock.ErrMissingToken, wantHighest: 30},
		{name: "invalid domain", ctx: context.Background(), domain: "", token: 40, wantErr: fencelock.ErrInvalidName},
		{name: "cancelled context", ctx: cancelled, domain: "d", token: 40, wantErr: context.Canceled, wantHighest: 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := fence.NewMemory()
			if err := m.Check(context.Background(), "d", 30); err != nil {
				t.Fatalf("Check(d, 30) returned %v", err)
			}
			ran := false
			err := m.Do(tt.ctx, tt.domain, tt.token, func(ctx context.Context) error {
				ran = true
				if tt.write != nil {
					return tt.write(ctx)
				}
				return nil
			})
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Do returned %v, want %v", err, tt.wantErr)
			}
			if ran != tt.wantRan {
				t.Fatalf("Do ran the write: %v, want %v", ran, tt.wantRan)
			}
			if tt.domain == "" {
				return
			}
			if got, _ := m.Highest(context.Background(), tt.domain); got != tt.wantHighest {
				t.Fatalf("Highest after Do = %d, want %d", got, tt.wantHighest)
			}
		})
	}
}
