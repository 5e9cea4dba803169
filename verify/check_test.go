package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hb builds histories by hand: each call adds an event one millisecond
// after the previous one.
type hb struct{ ops []Op }

func (b *hb) add(op Op) *hb {
	op.Index = len(b.ops)
	op.Time = time.Duration(len(b.ops)+1) * time.Millisecond
	b.ops = append(b.ops, op)
	return b
}

func (b *hb) call(p int, f, lock string, tok uint64, elem string) *hb {
	return b.add(Op{Process: p, Type: Invoke, F: f, Lock: lock, Token: tok, Elem: elem})
}

func (b *hb) ret(p int, t Type, f, lock string, tok uint64) *hb {
	return b.add(Op{Process: p, Type: t, F: f, Lock: lock, Token: tok})
}

func (b *hb) wrote(p int, lock string, tok uint64, elem string, etag string) *hb {
	b.call(p, FWrite, lock, tok, elem)
	return b.add(Op{Process: p, Type: OK, F: FWrite, Lock: lock, Token: tok, ETag: etag})
}

func (b *hb) final(lock string, list ...string) *hb {
	return b.add(Op{Process: -2, Type: OK, F: FFinal, Lock: lock, Value: list})
}

func TestCheckTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    *hb
		want string // "" = valid; else a substring of a problem
	}{
		{"increasing", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 4).
			call(2, FAcquire, "a", 0, "").ret(2, OK, FAcquire, "a", 7), ""},
		{"duplicate token", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 4).
			call(2, FAcquire, "a", 0, "").ret(2, OK, FAcquire, "a", 4), "granted twice"},
		{"decreasing in real time", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 9).
			call(2, FAcquire, "a", 0, "").ret(2, OK, FAcquire, "a", 5), "not smaller"},
		{"concurrent grants may come in any order", new(hb).
			call(1, FAcquire, "a", 0, "").call(2, FAcquire, "a", 0, "").
			ret(1, OK, FAcquire, "a", 9).ret(2, OK, FAcquire, "a", 5), ""},
		{"other locks are independent", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 9).
			call(2, FAcquire, "b", 0, "").ret(2, OK, FAcquire, "b", 5), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertCheck(t, CheckTokens(tt.h.ops), tt.want)
		})
	}
}

func TestCheckStore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    *hb
		want string
	}{
		{"appends kept", new(hb).
			wrote(1, "a", 4, "x", `"1"`).wrote(2, "a", 6, "y", `"2"`).final("a", "x", "y"), ""},
		{"lost append", new(hb).
			wrote(1, "a", 4, "x", `"1"`).wrote(2, "a", 6, "y", `"2"`).final("a", "y"), "lost update"},
		{"duplicate append", new(hb).
			wrote(1, "a", 4, "x", `"1"`).final("a", "x", "x"), "2 times"},
		{"stale write accepted (version order)", new(hb).
			wrote(2, "a", 6, "y", `"1"`).wrote(1, "a", 4, "x", `"2"`).final("a", "y", "x"), "stale write accepted"},
		{"stale write accepted after a fence raise", new(hb).
			call(2, FFence, "a", 6, "").ret(2, OK, FFence, "a", 6).
			wrote(1, "a", 4, "x", `"1"`).final("a", "x"), "stale write accepted"},
		{"refused write changed the object", new(hb).
			wrote(2, "a", 6, "y", `"1"`).
			call(1, FWrite, "a", 4, "x").ret(1, Fail, FWrite, "a", 4).final("a", "y", "x"), "refused write"},
		{"unknown write may or may not land", new(hb).
			wrote(2, "a", 6, "y", `"1"`).
			call(1, FWrite, "a", 7, "x").ret(1, Info, FWrite, "a", 7).final("a", "y"), ""},
		{"no final read", new(hb).wrote(1, "a", 4, "x", `"1"`), "no final read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertCheck(t, CheckStore(tt.h.ops), tt.want)
		})
	}
}

func TestCheckLinearizable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    *hb
		want string
	}{
		{"acquire release acquire", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 4).
			call(1, FRenew, "a", 4, "").ret(1, OK, FRenew, "a", 0).
			call(1, FRelease, "a", 4, "").ret(1, OK, FRelease, "a", 0).
			call(2, FDescribe, "a", 0, "").ret(2, OK, FDescribe, "a", 0).
			call(2, FAcquire, "a", 0, "").ret(2, OK, FAcquire, "a", 6), ""},
		{"expiry lets another acquire", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 4).
			call(2, FAcquire, "a", 0, "").ret(2, OK, FAcquire, "a", 6).
			call(1, FRenew, "a", 4, "").ret(1, Fail, FRenew, "a", 0), ""},
		{"renew of a superseded grant succeeds", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 4).
			call(2, FAcquire, "a", 0, "").ret(2, OK, FAcquire, "a", 6).
			call(1, FRenew, "a", 4, "").ret(1, OK, FRenew, "a", 0), "not linearizable"},
		{"token reused after release", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 4).
			call(1, FRelease, "a", 4, "").ret(1, OK, FRelease, "a", 0).
			call(2, FAcquire, "a", 0, "").ret(2, OK, FAcquire, "a", 4), "not linearizable"},
		{"describe shows a released grant", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, OK, FAcquire, "a", 4).
			call(1, FRelease, "a", 4, "").ret(1, OK, FRelease, "a", 0).
			call(2, FDescribe, "a", 0, "").ret(2, OK, FDescribe, "a", 4), "not linearizable"},
		{"try-lock refused on a free lock", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, Fail, FAcquire, "a", 0), "not linearizable"},
		{"unknown acquire may have granted", new(hb).
			call(1, FAcquire, "a", 0, "").ret(1, Info, FAcquire, "a", 0).
			call(2, FDescribe, "a", 0, "").ret(2, OK, FDescribe, "a", 5).
			call(3, FAcquire, "a", 0, "").ret(3, Fail, FAcquire, "a", 0), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			viz := filepath.Join(t.TempDir(), "lin.html")
			c := CheckLinearizable(tt.h.ops, 10*time.Second, viz)
			assertCheck(t, c, tt.want)
			if tt.want != "" {
				if _, err := os.Stat(viz); err != nil {
					t.Errorf("a violation should write the visualisation, got %v", err)
				}
			}
		})
	}
}

func assertCheck(t *testing.T, c Check, want string) {
	t.Helper()
	if want == "" {
		if !c.Valid {
			t.Errorf("checker %s flagged a valid history: %v", c.Name, c.Problems)
		}
		return
	}
	if c.Valid {
		t.Fatalf("checker %s accepted a history with a violation (want a problem mentioning %q)", c.Name, want)
	}
	if !strings.Contains(strings.Join(c.Problems, "\n"), want) {
		t.Errorf("checker %s problems %q do not mention %q", c.Name, c.Problems, want)
	}
}
