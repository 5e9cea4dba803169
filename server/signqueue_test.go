package server

import (
	"crypto/ed25519"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/sequencer"
)

// TestSignQueue_take: a batch takes the first request and those queued
// with its key, up to sequencer.MaxBatch, in order; the others stay queued
// in order.
func TestSignQueue_take(t *testing.T) {
	t.Parallel()
	req := func(key string, tok int) *signRequest {
		return &signRequest{seq: sequencer.Sequencer{ClusterID: "c", KeyID: key, Token: fencelock.Token(tok)}}
	}
	q := &signQueue{}
	for i, k := range []string{"a", "a", "b", "a"} {
		q.queue = append(q.queue, req(k, i))
	}
	if b := q.take(); len(b) != 3 || b[0].seq.Token != 0 || b[2].seq.Token != 3 || len(q.queue) != 1 || q.queue[0].seq.KeyID != "b" {
		t.Fatalf("batch of %d, %d left; want the three a's in order, the b left", len(b), len(q.queue))
	}
	for i := range 2*sequencer.MaxBatch + 1 {
		q.queue = append(q.queue, req("a", i))
	}
	if b := q.take(); len(b) != 1 || b[0].seq.KeyID != "b" {
		t.Fatalf("batch %+v, want the b alone", b)
	}
	if b := q.take(); len(b) != sequencer.MaxBatch || len(q.queue) != sequencer.MaxBatch+1 {
		t.Fatalf("batch of %d, %d left; want MaxBatch, the rest left", len(b), len(q.queue))
	}
}

// TestSignQueue_everyCallerGetsItsOwn: callers signing at once with two
// keys each get a sequencer that verifies as their own, some share a
// signature, and the queue ends with nobody signing.
func TestSignQueue_everyCallerGetsItsOwn(t *testing.T) {
	t.Parallel()
	keys := map[string]ed25519.PrivateKey{}
	v := &sequencer.Verifier{Now: func() time.Time { return time.Time{} }}
	for _, id := range []string{"k1", "k2"} {
		pub, priv, _ := ed25519.GenerateKey(nil)
		keys[id] = priv
		v.Keys = append(v.Keys, sequencer.Key{ClusterID: "c", ID: id, Public: pub})
	}
	q := &signQueue{}
	const n = 400
	texts := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		id := []string{"k1", "k2"}[i%3%2]
		wg.Go(func() {
			seq := sequencer.Sequencer{Lock: fencelock.LockName(fmt.Sprint("l", i)), Token: fencelock.Token(i + 1), ClusterID: "c", KeyID: id,
				Issued: time.Now(), LeaseEnd: time.Now().Add(time.Minute)}
			texts[i] = q.sign(&signRequest{seq: seq, key: keys[id], text: make(chan string, 1)})
		})
	}
	wg.Wait()
	batched := 0
	for i, text := range texts {
		seq, err := v.Verify(text, "")
		if err != nil || seq.Token != fencelock.Token(i+1) || seq.Lock != fencelock.LockName(fmt.Sprint("l", i)) {
			t.Fatalf("caller %d got %+v, %v; want its own sequencer", i, seq, err)
		}
		if _, body, _, _ := sequencer.Parse(text); body[0] == 2 { // a batch's
			batched++
		}
	}
	if batched == 0 {
		t.Errorf("none of %d sequencers signed at once shared a signature", n)
	}
	if q.signing || len(q.queue) != 0 {
		t.Fatalf("after every caller returned: signing %v, %d queued", q.signing, len(q.queue))
	}
}
