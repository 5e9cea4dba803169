package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpfence"
)

// HTTP headers of the store's API beyond the fencing contract's
// (httpfence.HeaderToken and HeaderDomain; on a GET answer they name the
// token that wrote the object and its domain).
const (
	// HeaderIdempotencyKey makes a write apply at most once.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayed is "true" on an answer replayed for a repeated
	// Idempotency-Key.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderFencing is "disabled" on every answer of a store running with
	// DisableFencing.
	HeaderFencing = "Fencing"
)

// MaxIdempotencyKeyLen is the longest Idempotency-Key, in bytes.
const MaxIdempotencyKeyLen = 255

// ObjectInfo describes one stored version of an object. It is the JSON body
// of a successful PUT.
type ObjectInfo struct {
	Key    string          `json:"key"`
	ETag   string          `json:"etag"`   // quoted, as in the ETag header
	Token  fencelock.Token `json:"token"`  // the fencing token that wrote this version
	Domain string          `json:"domain"` // the fence domain it was written in
	Size   int64           `json:"size"`
}

// FenceInfo is the JSON body of the fence endpoints.
type FenceInfo = httpfence.FenceInfo

// errIdempotencyReuse: an Idempotency-Key came back with a different request.
var errIdempotencyReuse = fmt.Errorf("idempotency key was used for a different request: %w", fencelock.ErrInvalidArgument)

// statusOf maps an error to the HTTP status the store answers with.
func statusOf(err error) int {
	if errors.Is(err, errIdempotencyReuse) {
		return http.StatusUnprocessableEntity
	}
	return httpfence.Status(err)
}

// errorAnswer turns an error into the answer the store sends for it.
func errorAnswer(err error) answer {
	return answer{Status: statusOf(err), Body: mustJSON(httpfence.Body(err))}
}

// mustJSON encodes values whose encoding cannot fail (plain structs).
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"error":"internal","message":"encode answer"}`)
	}
	return b
}

// answer is one HTTP answer of a write, as sent and as recorded for an
// Idempotency-Key.
type answer struct {
	Status int    `json:"status"`
	ETag   string `json:"etag,omitempty"`
	Body   []byte `json:"body,omitempty"` // JSON, or empty
}

func (a answer) write(w http.ResponseWriter) {
	if a.ETag != "" {
		w.Header().Set("ETag", a.ETag)
	}
	if len(a.Body) > 0 {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

func answerError(a answer) error { return httpfence.DecodeError(a.Status, a.Body) }
