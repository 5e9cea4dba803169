package store

import (
	"encoding/json"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestSweepIdempotency: the sweep deletes answers older than the TTL and
// records that do not decode, keeps newer answers, and gives answers
// written before records had a time (an older release) one, so they
// expire a TTL later instead of never.
func TestSweepIdempotency(t *testing.T) {
	db, err := openDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	const ttl = time.Hour
	err = db.Update(func(tx *bolt.Tx) error {
		for key, at := range map[string]time.Time{"old": now.Add(-2 * ttl), "new": now.Add(-ttl / 2)} {
			if err := putIdempotency(tx, key, idempotencyRecord{Fingerprint: []byte(key), At: at}); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketIdempotency).Put([]byte("garbage"), []byte("{not json")); err != nil {
			return err
		}
		legacy, _ := json.Marshal(map[string]any{"fingerprint": []byte("legacy"), "answer": answer{}})
		return tx.Bucket(bucketIdempotency).Put([]byte("legacy"), legacy)
	})
	if err != nil {
		t.Fatal(err)
	}
	deleted, more, err := sweepIdempotency(db, now, ttl, 100)
	if err != nil || deleted != 2 || more {
		t.Fatalf("sweep = %d deleted, more %v, %v; want 2 (the expired one, the one that does not decode), false, nil", deleted, more, err)
	}
	db.View(func(tx *bolt.Tx) error {
		if _, ok, _ := idempotencyOf(tx, "old", now, ttl); ok {
			t.Error("the expired answer is still there")
		}
		if _, ok, _ := idempotencyOf(tx, "new", now, ttl); !ok {
			t.Error("the answer within its TTL was deleted")
		}
		if rec, ok, _ := idempotencyOf(tx, "legacy", now, ttl); !ok || !rec.At.Equal(now) {
			t.Errorf("the answer without a time = %+v, %v; want kept and stamped with the sweep's time", rec, ok)
		}
		return nil
	})
	// A TTL later the legacy answer goes too; a limit stops a sweep early.
	if deleted, more, err = sweepIdempotency(db, now.Add(2*ttl), ttl, 1); err != nil || deleted != 1 || !more {
		t.Fatalf("limited sweep = %d deleted, more %v, %v; want 1, true, nil", deleted, more, err)
	}
	if deleted, more, err = sweepIdempotency(db, now.Add(2*ttl), ttl, 100); err != nil || deleted != 1 || more {
		t.Fatalf("second sweep = %d deleted, more %v, %v; want 1, false, nil", deleted, more, err)
	}
}
