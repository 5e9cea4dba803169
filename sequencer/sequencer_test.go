package sequencer_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/sequencer"
)

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestVerify(t *testing.T) {
	pub, priv := newKey(t)
	otherPub, otherPriv := newKey(t)
	now := time.Unix(1_800_000_000, 0)
	good := sequencer.Sequencer{Lock: "reports", Token: 1<<40 + 7, ClusterID: "prod", KeyID: "k1",
		LeaseHash: sequencer.LeaseHash("lease-1"), Issued: now, LeaseEnd: now.Add(10 * time.Second)}
	v := &sequencer.Verifier{Keys: []sequencer.Key{{ClusterID: "prod", ID: "k1", Public: pub}, {ClusterID: "staging", ID: "s1", Public: otherPub}},
		Now: func() time.Time { return now.Add(time.Second) }}
	text := sequencer.Sign(good, priv)

	got, err := v.Verify(text, "reports")
	if err != nil {
		t.Fatalf("a valid sequencer: %v", err)
	}
	if got.Lock != good.Lock || got.Token != good.Token || got.Epoch() != 1 || got.ClusterID != "prod" || got.LeaseHash != good.LeaseHash ||
		!got.Issued.Equal(now) || !got.LeaseEnd.Equal(good.LeaseEnd) {
		t.Fatalf("Verify returned %+v, want %+v", got, good)
	}

	tampered := func() string {
		s, f, sig, err := sequencer.Parse(text)
		if err != nil || s.Token != good.Token {
			t.Fatal(err)
		}
		f = append([]byte(nil), f...)
		f[len(f)-20] ^= 1 // a bit of the lease hash
		return sequencer.Prefix + base64.RawURLEncoding.EncodeToString(append(f, sig...))
	}
	rotated := good
	rotated.KeyID = "k0"
	staging := good
	staging.ClusterID, staging.KeyID = "staging", "s1"
	tests := []struct {
		name string
		text string
		lock fencelock.LockName
		v    *sequencer.Verifier
		want error
	}{
		{"forged: signed by another key under k1's name", sequencer.Sign(good, otherPriv), "reports", v, sequencer.ErrBadSignature},
		{"tampered", tampered(), "reports", v, sequencer.ErrBadSignature},
		{"expired", text, "reports", &sequencer.Verifier{Keys: v.Keys, Now: func() time.Time { return now.Add(11 * time.Second) }}, sequencer.ErrExpired},
		{"wrong lock", text, "payments", v, sequencer.ErrWrongLock},
		{"wrong cluster", text, "reports", &sequencer.Verifier{Keys: v.Keys[1:], Now: v.Now}, sequencer.ErrWrongCluster},
		{"rotated-away key", sequencer.Sign(rotated, priv), "reports", v, sequencer.ErrUnknownKey},
		{"garbage", "fls1.bm90IGEgc2VxdWVuY2Vy", "reports", v, sequencer.ErrMalformed},
		{"no prefix", "hello", "reports", v, sequencer.ErrMalformed},
		{"too long", sequencer.Prefix + strings.Repeat("A", sequencer.MaxLen), "reports", v, sequencer.ErrMalformed},
		{"truncated", text[:len(text)-10], "reports", v, sequencer.ErrMalformed},
	}
	for _, tt := range tests {
		_, err := tt.v.Verify(tt.text, tt.lock)
		if !errors.Is(err, tt.want) || !errors.Is(err, fencelock.ErrInvalidSequencer) {
			t.Errorf("%s: Verify = %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := (&sequencer.Verifier{Keys: v.Keys, Now: v.Now}).Verify(sequencer.Sign(staging, otherPriv), ""); err != nil {
		t.Errorf("a staging sequencer with the staging key trusted: %v", err)
	}
	if _, err := (&sequencer.Verifier{Keys: v.Keys, Skew: 2 * time.Second, Now: func() time.Time { return now.Add(11 * time.Second) }}).Verify(text, ""); err != nil {
		t.Errorf("within the skew allowance: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	f.Add(sequencer.Sign(sequencer.Sequencer{Lock: "a", Token: 1, ClusterID: "c", KeyID: "k"}, priv))
	f.Add("fls1.")
	for _, s := range sequencer.SignBatch([]sequencer.Sequencer{{Lock: "a", Token: 1, ClusterID: "c", KeyID: "k"}, {Lock: "b", Token: 2}, {Lock: "c", Token: 3}}, priv) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		_, _, _, _ = sequencer.Parse(text) // never panics
		_, _ = (&sequencer.Verifier{}).Verify(text, "a")
	})
}

// TestSignBatch: every sequencer of a batch verifies alone, for its own
// lock and token; one whose fields, path or signature changed, or a path
// grafted onto another's fields, does not.
func TestSignBatch(t *testing.T) {
	pub, priv := newKey(t)
	now := time.Unix(1_800_000_000, 0)
	v := &sequencer.Verifier{Keys: []sequencer.Key{{ClusterID: "prod", ID: "k1", Public: pub}}, Now: func() time.Time { return now }}
	for _, n := range []int{1, 2, 3, 7, 64, 65, 130} {
		var ss []sequencer.Sequencer
		for i := range n {
			ss = append(ss, sequencer.Sequencer{Lock: fencelock.LockName(fmt.Sprintf("lock-%d", i)), Token: fencelock.Token(100 + i),
				ClusterID: "prod", KeyID: "k1", LeaseHash: sequencer.LeaseHash(fencelock.LeaseID(fmt.Sprint(i))), Issued: now, LeaseEnd: now.Add(time.Minute)})
		}
		texts := sequencer.SignBatch(ss, priv)
		if len(texts) != n {
			t.Fatalf("%d sequencers: %d texts", n, len(texts))
		}
		sigs := map[string]int{}
		for i, text := range texts {
			if len(text) > sequencer.MaxLen {
				t.Fatalf("%d: %d bytes, over MaxLen", i, len(text))
			}
			_, body, sig, err := sequencer.Parse(text)
			if wantV := byte(2); err != nil || n%sequencer.MaxBatch != 1 && body[0] != wantV {
				t.Fatalf("batch of %d, sequencer %d: version %d, %v; want the batched encoding", n, i, body[0], err)
			}
			sigs[string(sig)]++
			got, err := v.VerifyWrite(text, ss[i].Lock, ss[i].Token)
			if err != nil || got.Lock != ss[i].Lock || got.LeaseHash != ss[i].LeaseHash || !got.LeaseEnd.Equal(ss[i].LeaseEnd) {
				t.Fatalf("batch of %d, sequencer %d: %+v, %v", n, i, got, err)
			}
		}
		if want := (n + sequencer.MaxBatch - 1) / sequencer.MaxBatch; len(sigs) != want {
			t.Errorf("batch of %d: %d signatures, want %d (one per %d)", n, len(sigs), want, sequencer.MaxBatch)
		}
	}
	texts := sequencer.SignBatch([]sequencer.Sequencer{
		{Lock: "a", Token: 5, ClusterID: "prod", KeyID: "k1", Issued: now, LeaseEnd: now.Add(time.Minute)},
		{Lock: "b", Token: 6, ClusterID: "prod", KeyID: "k1", Issued: now, LeaseEnd: now.Add(time.Minute)},
		{Lock: "c", Token: 7, ClusterID: "prod", KeyID: "k1", Issued: now, LeaseEnd: now.Add(time.Minute)},
	}, priv)
	_, bodyA, sigA, err := sequencer.Parse(texts[0])
	if err != nil {
		t.Fatal(err)
	}
	_, bodyB, _, err := sequencer.Parse(texts[1])
	if err != nil {
		t.Fatal(err)
	}
	encode := func(body, sig []byte) string {
		return sequencer.Prefix + base64.RawURLEncoding.EncodeToString(append(append([]byte(nil), body...), sig...))
	}
	pathLen := 2 + 2*32 // depth, index, two siblings
	for i := range bodyA {
		b := append([]byte(nil), bodyA...)
		b[i] ^= 0x10
		if _, err := v.Verify(encode(b, sigA), ""); !errors.Is(err, fencelock.ErrInvalidSequencer) {
			t.Fatalf("byte %d of the body changed (path from byte %d): %v, want a refusal", i, len(bodyA)-pathLen, err)
		}
	}
	if bodyA[0] != 2 || len(bodyA) <= pathLen {
		t.Fatalf("a's body: version %d, %d bytes; want a batched sequencer with a path", bodyA[0], len(bodyA))
	}
	for _, at := range []int{len(bodyA) - pathLen, len(bodyA) - pathLen + 1} { // depth, index
		for val := range 256 {
			b := append([]byte(nil), bodyA...)
			if b[at] == byte(val) {
				continue
			}
			b[at] = byte(val)
			if _, err := v.Verify(encode(b, sigA), ""); !errors.Is(err, fencelock.ErrInvalidSequencer) {
				t.Fatalf("byte %d of the path set to %d: %v, want a refusal", at, val, err)
			}
		}
	}
	grafted := append(append([]byte(nil), bodyB[:len(bodyB)-pathLen]...), bodyA[len(bodyA)-pathLen:]...)
	if _, err := v.Verify(encode(grafted, sigA), ""); !errors.Is(err, sequencer.ErrBadSignature) {
		t.Errorf("b's fields with a's path: %v, want ErrBadSignature", err)
	}
	bad := append([]byte(nil), sigA...)
	bad[0] ^= 1
	if _, err := v.Verify(encode(bodyA, bad), ""); !errors.Is(err, sequencer.ErrBadSignature) {
		t.Errorf("a changed signature: %v, want ErrBadSignature", err)
	}
	if _, err := v.Verify(encode(bodyA[:len(bodyA)-pathLen], sigA), ""); !errors.Is(err, fencelock.ErrInvalidSequencer) {
		t.Errorf("a batched sequencer without its path: %v, want a refusal", err)
	}
}
