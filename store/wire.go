package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/fencelock/fencelock"
)

// HTTP headers of the store's API.
const (
	// HeaderToken carries the fencing token of a write, in decimal; on a
	// GET answer, the token that wrote the object.
	HeaderToken = "Fencing-Token"
	// HeaderDomain names the fence domain of a write; the object key if
	// absent. On a GET answer, the domain the object was written in.
	HeaderDomain = "Fencing-Domain"
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
type FenceInfo struct {
	Domain  string          `json:"domain"`
	Highest fencelock.Token `json:"highest"`
}

// errorBody is the JSON body of every error answer. Error is a wire code
// (fencelock.Code); Domain, Token and Highest are set for stale tokens.
type errorBody struct {
	Error   string          `json:"error"`
	Message string          `json:"message,omitempty"`
	Domain  string          `json:"domain,omitempty"`
	Token   fencelock.Token `json:"token,omitempty"`
	Highest fencelock.Token `json:"highest,omitempty"`
}

// codeInternal is the wire code of a failure inside the store.
const codeInternal = "internal"

// errIdempotencyReuse: an Idempotency-Key came back with a different request.
var errIdempotencyReuse = fmt.Errorf("idempotency key was used for a different request: %w", fencelock.ErrInvalidArgument)

// statusOf maps an error to the HTTP status the store answers with.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errIdempotencyReuse):
		return http.StatusUnprocessableEntity
	case errors.Is(err, fencelock.ErrStaleToken):
		return http.StatusConflict
	case errors.Is(err, fencelock.ErrMissingToken):
		return http.StatusPreconditionRequired
	case errors.Is(err, fencelock.ErrPreconditionFailed):
		return http.StatusPreconditionFailed
	case errors.Is(err, fencelock.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, fencelock.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, fencelock.ErrInvalidToken),
		errors.Is(err, fencelock.ErrInvalidName),
		errors.Is(err, fencelock.ErrInvalidArgument):
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}

// errorAnswer turns an error into the answer the store sends for it.
func errorAnswer(err error) answer {
	body := errorBody{Error: fencelock.Code(err), Message: err.Error()}
	if body.Error == "" {
		body.Error = codeInternal
	}
	var stale *fencelock.StaleTokenError
	if errors.As(err, &stale) {
		body.Domain, body.Token, body.Highest = stale.Domain, stale.Token, stale.Highest
	}
	return answer{Status: statusOf(err), Body: mustJSON(body)}
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

// Error is an error answer of the store other than a stale token (which comes
// back as a *fencelock.StaleTokenError). errors.Is matches it against the
// sentinel of its wire code, and against fencelock.ErrUnavailable for a 5xx
// answer without a known code.
type Error struct {
	StatusCode int    // the HTTP status
	Code       string // the wire code, see fencelock.Code; "" if the body had none
	Message    string // the store's explanation
}

// Error describes the answer.
func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("store answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	return fmt.Sprintf("store answered %d: %s", e.StatusCode, e.Message)
}

// Unwrap returns the sentinel error of e's code, or nil.
func (e *Error) Unwrap() error {
	if err := fencelock.ErrorForCode(e.Code); err != nil {
		return err
	}
	if e.StatusCode >= 500 {
		return fencelock.ErrUnavailable
	}
	return nil
}

// decodeError turns an error answer back into the error it stands for.
func decodeError(status int, body []byte) error {
	var eb errorBody
	_ = json.Unmarshal(body, &eb) // a body that is not ours leaves eb empty
	if eb.Error == fencelock.CodeStaleToken {
		return &fencelock.StaleTokenError{Domain: eb.Domain, Token: eb.Token, Highest: eb.Highest}
	}
	return &Error{StatusCode: status, Code: eb.Error, Message: eb.Message}
}

func answerError(a answer) error { return decodeError(a.Status, a.Body) }
