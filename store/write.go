package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

type opKind byte

const (
	opPut    opKind = 'P'
	opDelete opKind = 'D'
	opCheck  opKind = 'C' // raise a domain's highest token, write nothing
)

// write is one fenced write, validated and ready to apply.
type write struct {
	op          opKind
	key         string // opPut, opDelete
	domain      string
	token       fencelock.Token
	ifMatch     string
	ifNoneMatch string // "" or "*"
	body        []byte
	idemKey     string
}

// fingerprint identifies the request behind an Idempotency-Key.
func (w write) fingerprint() []byte {
	h := sha256.New()
	for _, s := range []string{string(w.op), w.key, w.domain, w.ifMatch, w.ifNoneMatch} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(s)))
		h.Write([]byte(s))
	}
	_ = binary.Write(h, binary.BigEndian, uint64(w.token))
	h.Write(w.body)
	return h.Sum(nil)
}

// errOtherDomain: a write to an existing object names another fence domain
// than the one its current version was written in.
var errOtherDomain = fmt.Errorf("object fenced in another domain: %w", fencelock.ErrInvalidArgument)

// Results of a write, the "result" label of the writes metric.
const (
	resultAccepted           = "accepted"
	resultStale              = "rejected_stale"
	resultMissingToken       = "rejected_missing_token"
	resultPreconditionFailed = "precondition_failed"
	resultNotFound           = "not_found"
	resultOtherDomain        = "rejected_other_domain"
	resultUnfenced           = "unfenced"       // DisableFencing: accepted, fencing would have too
	resultUnfencedStale      = "unfenced_stale" // DisableFencing: accepted, fencing would have refused it
)

func resultOf(err error) string {
	switch {
	case errors.Is(err, fencelock.ErrStaleToken):
		return resultStale
	case errors.Is(err, fencelock.ErrMissingToken):
		return resultMissingToken
	case errors.Is(err, fencelock.ErrPreconditionFailed):
		return resultPreconditionFailed
	case errors.Is(err, errOtherDomain):
		return resultOtherDomain
	default:
		return resultNotFound
	}
}

// apply runs w in one bbolt transaction: the idempotency lookup, the fence
// check, the preconditions, the write, the new highest token and the
// idempotency record commit together or not at all. It returns the answer to
// send and whether it is a replay. Its error means nothing was applied.
func (s *Server) apply(ctx context.Context, w write) (answer, bool, error) {
	if err := ctx.Err(); err != nil {
		return answer{}, false, fmt.Errorf("apply write: %w", err)
	}
	var (
		ans      answer
		result   string
		replayed bool
	)
	now := time.Now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		if w.idemKey != "" {
			rec, ok, err := idempotencyOf(tx, w.idemKey, now, s.cfg.IdempotencyTTL)
			if err != nil {
				return err
			}
			if ok {
				if !bytes.Equal(rec.Fingerprint, w.fingerprint()) {
					return errIdempotencyReuse
				}
				ans, replayed = rec.Answer, true
				return nil
			}
		}
		var err error
		if ans, result, err = s.decide(tx, w); err != nil {
			return err
		}
		if w.idemKey != "" {
			return putIdempotency(tx, w.idemKey, idempotencyRecord{Fingerprint: w.fingerprint(), Answer: ans, At: now})
		}
		return nil
	})
	if err != nil {
		return answer{}, false, fmt.Errorf("apply write: %w", err)
	}
	if !replayed {
		s.observe(w, result)
	}
	return ans, replayed, nil
}

// decide applies the fence rule and the preconditions to w inside tx, and
// performs it if they hold. Refusals are answers, not errors; an error means
// the transaction must roll back.
func (s *Server) decide(tx *bolt.Tx, w write) (answer, string, error) {
	highest, _ := highestIn(tx, w.domain)
	result := resultAccepted
	if err := fence.Admit(w.domain, highest, w.token); err != nil {
		if !s.cfg.DisableFencing {
			return errorAnswer(err), resultOf(err), nil
		}
		result = resultUnfencedStale
	} else if s.cfg.DisableFencing {
		result = resultUnfenced
	}

	var ans answer
	switch w.op {
	case opPut, opDelete:
		cur, exists, err := recordOf(tx, w.key)
		if err != nil {
			return answer{}, "", err
		}
		if exists && cur.Domain != w.domain && !s.cfg.DisableFencing {
			// The fence rule holds per domain: a write in a domain nobody
			// raised would let a stale holder overwrite what a newer one
			// wrote in the object's own domain.
			err := fmt.Errorf("object %q is fenced in domain %q, not %q (delete it there to move it): %w", w.key, cur.Domain, w.domain, errOtherDomain)
			return errorAnswer(err), resultOf(err), nil
		}
		if err := preconditions(w.ifMatch, w.ifNoneMatch, cur, exists); err != nil {
			return errorAnswer(err), resultOf(err), nil
		}
		if w.op == opDelete {
			if !exists {
				err := fmt.Errorf("delete object %q: %w", w.key, fencelock.ErrNotFound)
				return errorAnswer(err), resultNotFound, nil
			}
			if err := deleteObject(tx, w.key); err != nil {
				return answer{}, "", err
			}
			ans = answer{Status: http.StatusNoContent}
			break
		}
		seq, err := tx.Bucket(bucketObjects).NextSequence()
		if err != nil {
			return answer{}, "", fmt.Errorf("allocate version: %w", err)
		}
		rec := record{ETag: fmt.Sprintf(`"%d"`, seq), Token: w.token, Domain: w.domain, Size: int64(len(w.body)), Modified: time.Now().UTC()}
		if err := putObject(tx, w.key, rec, w.body); err != nil {
			return answer{}, "", err
		}
		info := ObjectInfo{Key: w.key, ETag: rec.ETag, Token: rec.Token, Domain: rec.Domain, Size: rec.Size}
		ans = answer{Status: http.StatusOK, ETag: rec.ETag, Body: mustJSON(info)}
	case opCheck:
		ans = answer{Status: http.StatusOK, Body: mustJSON(FenceInfo{Domain: w.domain, Highest: max(highest, w.token)})}
	}
	// With fencing disabled the highest token is still tracked (not
	// enforced), so the demo can tell which accepted writes were stale.
	if w.token > highest {
		if err := setHighest(tx, w.domain, w.token); err != nil {
			return answer{}, "", err
		}
	}
	return ans, result, nil
}

// preconditions evaluates If-Match and If-None-Match: * against the current
// version of an object, as S3 conditional writes do. The error wraps
// fencelock.ErrPreconditionFailed.
func preconditions(ifMatch, ifNoneMatch string, cur record, exists bool) error {
	if ifMatch != "" {
		if !exists {
			return fmt.Errorf("If-Match %s: the object does not exist: %w", ifMatch, fencelock.ErrPreconditionFailed)
		}
		if !etagMatches(ifMatch, cur.ETag) {
			return fmt.Errorf("If-Match %s: the current ETag is %s: %w", ifMatch, cur.ETag, fencelock.ErrPreconditionFailed)
		}
	}
	if ifNoneMatch != "" && exists {
		return fmt.Errorf("If-None-Match %s: the object exists with ETag %s: %w", ifNoneMatch, cur.ETag, fencelock.ErrPreconditionFailed)
	}
	return nil
}

// etagMatches reports whether an If-Match list ("*", or comma-separated
// ETags, quoted or not) names etag, by strong comparison.
func etagMatches(list, etag string) bool {
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "*" {
			return true
		}
		if !strings.HasPrefix(item, `"`) {
			item = `"` + item + `"`
		}
		if item == etag {
			return true
		}
	}
	return false
}
