package redis_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/sequencer"
)

func TestFence_SetSequencer(t *testing.T) {
	tr := newTestRedis(t)
	f := tr.fence()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	v := &sequencer.Verifier{Keys: []sequencer.Key{{ClusterID: "c", ID: "k", Public: pub}}}
	now := time.Now()
	seq := sequencer.Sequencer{Lock: "orders", Token: 1<<52 + 1, ClusterID: "c", KeyID: "k", Issued: now, LeaseEnd: now.Add(time.Minute)}
	key := tr.prefix + "{orders}:status"
	if err := f.SetSequencer(t.Context(), v, sequencer.Sign(seq, priv), "orders", key, "paid", 0); err != nil {
		t.Fatal(err)
	}
	expired := seq
	expired.LeaseEnd = now.Add(-time.Second)
	if err := f.SetSequencer(t.Context(), v, sequencer.Sign(expired, priv), "orders", key, "stale", 0); !errors.Is(err, sequencer.ErrExpired) {
		t.Fatalf("an expired sequencer: %v, want ErrExpired", err)
	}
	if got, _ := tr.rdb.Get(t.Context(), key).Result(); got != "paid" {
		t.Fatalf("%s = %q, want paid", key, got)
	}
	if h, _ := f.Highest(t.Context(), "orders"); h != seq.Token {
		t.Fatalf("highest %d, want %d", h, seq.Token)
	}
}
