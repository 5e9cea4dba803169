package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencelock/fencelock"
)

// The buckets of store.db.
var (
	bucketObjects     = []byte("objects")     // key -> JSON record
	bucketData        = []byte("data")        // key -> body
	bucketFences      = []byte("fences")      // domain -> highest token, 8 bytes big-endian
	bucketIdempotency = []byte("idempotency") // Idempotency-Key -> JSON idempotencyRecord
)

// record is the metadata of an object's current version.
type record struct {
	ETag     string          `json:"etag"`
	Token    fencelock.Token `json:"token"`
	Domain   string          `json:"domain"`
	Size     int64           `json:"size"`
	Modified time.Time       `json:"modified"`
}

// idempotencyRecord is the first answer given to an Idempotency-Key.
type idempotencyRecord struct {
	Fingerprint []byte `json:"fingerprint"`
	Answer      answer `json:"answer"`
	// At is when the answer was given; records written before it existed
	// have none, and the sweep gives them one.
	At time.Time `json:"at,omitzero"`
}

// expired reports whether rec's answer is older than ttl at now.
func (rec idempotencyRecord) expired(now time.Time, ttl time.Duration) bool {
	return !rec.At.IsZero() && now.Sub(rec.At) >= ttl
}

func openDB(dir string) (*bolt.DB, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, "store.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("open %s: another store is using this data dir", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketObjects, bucketData, bucketFences, bucketIdempotency} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("initialize %s: %w", path, err)
	}
	return db, nil
}

// highestIn returns the highest token of domain, and whether the domain has
// accepted any token.
func highestIn(tx *bolt.Tx, domain string) (fencelock.Token, bool) {
	v := tx.Bucket(bucketFences).Get([]byte(domain))
	if len(v) != 8 {
		return 0, false
	}
	return fencelock.Token(binary.BigEndian.Uint64(v)), true
}

func setHighest(tx *bolt.Tx, domain string, token fencelock.Token) error {
	if err := tx.Bucket(bucketFences).Put([]byte(domain), binary.BigEndian.AppendUint64(nil, uint64(token))); err != nil {
		return fmt.Errorf("store highest token of %q: %w", domain, err)
	}
	return nil
}

// recordOf returns the metadata of key's current version.
func recordOf(tx *bolt.Tx, key string) (record, bool, error) {
	v := tx.Bucket(bucketObjects).Get([]byte(key))
	if v == nil {
		return record{}, false, nil
	}
	var rec record
	if err := json.Unmarshal(v, &rec); err != nil {
		return record{}, false, fmt.Errorf("decode record of %q: %w", key, err)
	}
	return rec, true, nil
}

func putObject(tx *bolt.Tx, key string, rec record, data []byte) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode record of %q: %w", key, err)
	}
	if err := tx.Bucket(bucketObjects).Put([]byte(key), b); err != nil {
		return fmt.Errorf("store record of %q: %w", key, err)
	}
	if err := tx.Bucket(bucketData).Put([]byte(key), data); err != nil {
		return fmt.Errorf("store data of %q: %w", key, err)
	}
	return nil
}

func deleteObject(tx *bolt.Tx, key string) error {
	if err := tx.Bucket(bucketObjects).Delete([]byte(key)); err != nil {
		return fmt.Errorf("delete record of %q: %w", key, err)
	}
	if err := tx.Bucket(bucketData).Delete([]byte(key)); err != nil {
		return fmt.Errorf("delete data of %q: %w", key, err)
	}
	return nil
}

// idempotencyOf returns the answer recorded for key, unless there is none
// or it is older than ttl at now.
func idempotencyOf(tx *bolt.Tx, key string, now time.Time, ttl time.Duration) (idempotencyRecord, bool, error) {
	v := tx.Bucket(bucketIdempotency).Get([]byte(key))
	if v == nil {
		return idempotencyRecord{}, false, nil
	}
	var rec idempotencyRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return idempotencyRecord{}, false, fmt.Errorf("decode idempotency record: %w", err)
	}
	if rec.expired(now, ttl) {
		return idempotencyRecord{}, false, nil
	}
	return rec, true, nil
}

func putIdempotency(tx *bolt.Tx, key string, rec idempotencyRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode idempotency record: %w", err)
	}
	if err := tx.Bucket(bucketIdempotency).Put([]byte(key), b); err != nil {
		return fmt.Errorf("store idempotency record: %w", err)
	}
	return nil
}

// sweepIdempotency deletes up to limit expired idempotency records and
// stamps records without a time with now (they expire one ttl later);
// records that do not decode are deleted too. It reads in a read-only
// transaction, which does not hold up writes, and changes what it found in
// a short write transaction, checking each record again there. It returns
// how many records it deleted and whether it stopped at the limit.
func sweepIdempotency(db *bolt.DB, now time.Time, ttl time.Duration, limit int) (deleted int, more bool, err error) {
	var found [][]byte
	err = db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketIdempotency).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if op, _ := sweepAction(v, now, ttl); op == sweepKeep {
				continue
			}
			if len(found) == limit {
				more = true
				break
			}
			found = append(found, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil || len(found) == 0 {
		return 0, more, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIdempotency)
		for _, k := range found {
			op, rec := sweepAction(b.Get(k), now, ttl)
			switch op {
			case sweepDelete:
				if err := b.Delete(k); err != nil {
					return fmt.Errorf("delete idempotency record: %w", err)
				}
				deleted++
			case sweepStamp:
				rec.At = now
				if err := putIdempotency(tx, string(k), rec); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return deleted, more, err
}

type sweepOp int

const (
	sweepKeep   sweepOp = iota
	sweepDelete         // expired, or does not decode
	sweepStamp          // written before records had a time
)

// sweepAction decides what the sweep does with the record v, and returns
// it decoded.
func sweepAction(v []byte, now time.Time, ttl time.Duration) (sweepOp, idempotencyRecord) {
	var rec idempotencyRecord
	switch {
	case v == nil:
		return sweepKeep, rec // deleted meanwhile
	case json.Unmarshal(v, &rec) != nil, rec.expired(now, ttl):
		return sweepDelete, rec
	case rec.At.IsZero():
		return sweepStamp, rec
	}
	return sweepKeep, rec
}
