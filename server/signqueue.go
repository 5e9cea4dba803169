package server

import (
	"crypto/ed25519"
	"runtime"
	"sync"

	"github.com/fencelock/fencelock/sequencer"
)

// signRequest is a sequencer waiting for its signature.
type signRequest struct {
	seq    sequencer.Sequencer
	key    ed25519.PrivateKey
	text   chan string // buffered: its signature, or "" when its caller is to sign next
	signed bool        // set by the caller that signed it
}

// signQueue signs sequencers on their callers' goroutines, with no signer
// of its own to hand them to: a caller that finds nobody signing signs the
// batch its request is in, and one that finds somebody signing waits. The
// requests queued meanwhile share one signature (sequencer.SignBatch), as
// one Ed25519 signature costs more than the rest of a grant; the caller
// that signed passes the next batch on to the first caller queued, so that
// none signs for others longer than one batch.
type signQueue struct {
	mu      sync.Mutex
	queue   []*signRequest
	signing bool // a caller signs, or has been told to
}

// sign returns r's sequencer, signed.
func (q *signQueue) sign(r *signRequest) string {
	q.mu.Lock()
	q.queue = append(q.queue, r)
	if q.signing {
		q.mu.Unlock()
		if text := <-r.text; text != "" {
			return text
		}
		q.mu.Lock() // our turn: signing stays set
	}
	q.signing = true
	q.mu.Unlock()
	runtime.Gosched() // the callers that can run now queue theirs: one signature
	q.mu.Lock()
	for !r.signed {
		batch := q.take()
		q.mu.Unlock()
		ss := make([]sequencer.Sequencer, len(batch))
		for i, b := range batch {
			ss[i] = b.seq
		}
		for i, text := range sequencer.SignBatch(ss, batch[0].key) {
			batch[i].signed = true
			batch[i].text <- text
		}
		q.mu.Lock()
	}
	if len(q.queue) > 0 {
		q.queue[0].text <- "" // its caller signs the next batch
	} else {
		q.signing = false
	}
	q.mu.Unlock()
	return <-r.text
}

// take removes the next batch from the queue: the first request and those
// queued with its key, up to sequencer.MaxBatch, in order.
func (q *signQueue) take() []*signRequest {
	first := q.queue[0].seq
	var batch, rest []*signRequest
	for _, r := range q.queue {
		if len(batch) < sequencer.MaxBatch && r.seq.KeyID == first.KeyID && r.seq.ClusterID == first.ClusterID {
			batch = append(batch, r)
		} else {
			rest = append(rest, r)
		}
	}
	q.queue = rest
	return batch
}
