package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
)

func hashOf(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }

func testACL(t *testing.T) *acl.ACL {
	t.Helper()
	a, err := acl.Parse(strings.NewReader("# callers\nbilling "+hashOf("b-secret")+"\nops sha256:"+hashOf("o-secret")+"\n"),
		strings.NewReader("billing lock,read billing/\nops admin *\n* read public/\n"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestACL_everyOperationChecks: with an ACL, each operation of the node
// refuses a caller without a credential and one without the permission.
func TestACL_everyOperationChecks(t *testing.T) {
	t.Parallel()
	policy := testACL(t)
	s := openInProcessWith(t, func(c *Config) { c.ACL = policy })
	as := func(id string) context.Context { return acl.WithIdentity(t.Context(), id) }
	billing, anon, other := as("billing"), t.Context(), as("hr")
	g, err := s.Acquire(billing, AcquireRequest{Name: "billing/42", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(ctx context.Context) error{
		"Acquire": func(ctx context.Context) error {
			_, err := s.Acquire(ctx, AcquireRequest{Name: "billing/43", TTL: time.Minute})
			return err
		},
		"Renew":      func(ctx context.Context) error { return renewOne(ctx, s, g) },
		"CancelWait": func(ctx context.Context) error { return s.CancelWait(ctx, g.Name, "rid") },
		"Describe":   func(ctx context.Context) error { _, err := s.Describe(ctx, g.Name); return err },
		"List":       func(ctx context.Context) error { _, _, err := s.List(ctx, "billing/", "", 10); return err },
		"Release":    func(ctx context.Context) error { return s.Release(ctx, g.Name, g.LeaseID, g.Token) },
	}
	for name, call := range calls {
		if err := call(anon); !errors.Is(err, fencelock.ErrUnauthenticated) {
			t.Errorf("%s without a credential: %v, want ErrUnauthenticated", name, err)
		}
		if err := call(other); !errors.Is(err, fencelock.ErrPermissionDenied) {
			t.Errorf("%s by an identity without the permission: %v, want ErrPermissionDenied", name, err)
		}
	}
	if _, _, err := s.List(billing, "", "", 10); !errors.Is(err, fencelock.ErrPermissionDenied) {
		t.Errorf("List of every name with read on billing/ only: %v, want ErrPermissionDenied", err)
	}
	if err := s.Release(billing, g.Name, g.LeaseID, g.Token); err != nil {
		t.Errorf("Release by the holder's identity: %v", err)
	}
}

// TestACL_requestIDsBelongToTheirCaller: another identity that knows a
// request id gets neither its grant nor its cancellation, and one that
// knows a lease id can neither renew nor release the grant.
func TestACL_requestIDsBelongToTheirCaller(t *testing.T) {
	t.Parallel()
	s := openInProcessWith(t, func(c *Config) { c.ACL = testACL(t) })
	billing := acl.WithIdentity(t.Context(), "billing")
	thief := acl.WithIdentity(t.Context(), acl.AdminIdentity) // may lock anything, but owns nothing
	g, err := s.Acquire(billing, AcquireRequest{Name: "billing/42", TTL: time.Minute, RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(thief, AcquireRequest{Name: "billing/42", TTL: time.Minute, RequestID: "r1"}); !errors.Is(err, fencelock.ErrPermissionDenied) {
		t.Fatalf("a retry of r1 by another identity: %v, want ErrPermissionDenied (and no lease id)", err)
	}
	if err := s.CancelWait(thief, "billing/42", "r1"); !errors.Is(err, fencelock.ErrPermissionDenied) {
		t.Fatalf("CancelWait of r1 by another identity: %v, want ErrPermissionDenied", err)
	}
	// The refused call was another identity's: it leaves billing's
	// grant alone, neither marked as reaching nobody nor taken back.
	time.Sleep(callGrace + 500*time.Millisecond)
	if l, _ := s.fsm.Get("billing/42"); l.Holder == nil || l.Holder.Token != g.Token || l.Holder.Detached {
		t.Fatalf("billing's grant after another identity's refused retry: %+v; want it held as it was", l.Holder)
	}
	if err := renewOne(thief, s, g); !errors.Is(err, fencelock.ErrPermissionDenied) {
		t.Fatalf("Renew of billing's grant by another identity that knows its lease id: %v, want ErrPermissionDenied", err)
	}
	if err := s.Release(thief, g.Name, g.LeaseID, g.Token); !errors.Is(err, fencelock.ErrPermissionDenied) {
		t.Fatalf("Release of billing's grant by another identity that knows its lease id: %v, want ErrPermissionDenied", err)
	}
	again, err := s.Acquire(billing, AcquireRequest{Name: "billing/42", TTL: time.Minute, RequestID: "r1"})
	if err != nil || again.LeaseID != g.LeaseID {
		t.Fatalf("a retry of r1 by its owner: %+v, %v; want the same grant", again, err)
	}
}

// TestLimits_waiters: a lock's queue and an identity's waiters are capped
// (a retry of a queued request still passes), and Describe lists the first
// waiters with their count.
func TestLimits_waiters(t *testing.T) {
	t.Parallel()
	s := openInProcessWith(t, func(c *Config) { c.ACL, c.MaxWaitersPerLock, c.MaxWaitersPerCaller = testACL(t), 150, 160 })
	billing := acl.WithIdentity(t.Context(), "billing")
	if _, err := s.Acquire(billing, AcquireRequest{Name: "billing/q", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wait := func(name, rid string) error {
		ctx, cancel := context.WithTimeout(billing, 100*time.Millisecond)
		defer cancel()
		_, err := s.Acquire(ctx, AcquireRequest{Name: fencelock.LockName(name), TTL: time.Minute, Wait: time.Hour, RequestID: rid, KeepPlace: true})
		return err
	}
	waiting, stop := context.WithCancel(billing)
	defer stop()
	for i := range 150 {
		go func() {
			_, _ = s.Acquire(waiting, AcquireRequest{Name: "billing/q", TTL: time.Minute, Wait: time.Hour, RequestID: fmt.Sprint("w", i)})
		}()
	}
	eventually(t, "150 waiters queued", func() bool {
		li, err := s.Describe(billing, "billing/q")
		return err == nil && li.WaiterCount == 150
	})
	if err := wait("billing/q", "w150"); !errors.Is(err, fencelock.ErrResourceExhausted) {
		t.Fatalf("the 151st waiter: %v, want ErrResourceExhausted", err)
	}
	if err := wait("billing/q", "w3"); errors.Is(err, fencelock.ErrResourceExhausted) {
		t.Fatalf("a retry of a queued request was refused: %v", err)
	}
	li, err := s.Describe(billing, "billing/q")
	if err != nil || len(li.Waiters) != 100 || li.WaiterCount != 150 {
		t.Fatalf("Describe: %d waiters listed of %d (%v); want 100 of 150", len(li.Waiters), li.WaiterCount, err)
	}
}

// TestAudit: grants and releases are recorded with the caller's identity,
// and the trail is an admin's to read.
func TestAudit(t *testing.T) {
	t.Parallel()
	s := openInProcessWith(t, func(c *Config) { c.ACL = testACL(t) })
	billing := acl.WithIdentity(t.Context(), "billing")
	g, err := s.Acquire(billing, AcquireRequest{Name: "billing/a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(billing, g.Name, g.LeaseID, g.Token); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, ev := range s.Events() {
		if ev.Lock == "billing/a" {
			kinds[ev.Kind] = ev.Identity
		}
	}
	if kinds["grant"] != "billing" || kinds["release"] != "billing" {
		t.Fatalf("audit events %v, want the grant and the release by billing", kinds)
	}
}

// TestRequireAdmin_withoutCredentials: a node with neither a policy nor an
// admin token serves its admin-only surfaces to loopback callers only.
func TestRequireAdmin_withoutCredentials(t *testing.T) {
	t.Parallel()
	s := openInProcessWith(t, func(*Config) {})
	for peer, want := range map[string]error{"127.0.0.1:5000": nil, "[::1]:5000": nil, "10.0.0.7:5000": fencelock.ErrUnauthenticated, "": fencelock.ErrUnauthenticated} {
		if err := s.RequireAdmin(t.Context(), peer); want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("RequireAdmin from %q: %v, want %v", peer, err, want)
		}
	}
}
