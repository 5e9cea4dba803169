package httpfence

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/sequencer"
)

// The headers of the contract.
const (
	// HeaderToken carries a write's fencing token, in decimal.
	HeaderToken = "Fencing-Token"
	// HeaderDomain names a write's fence domain; without it the resource
	// picks one (the store: the object key; Handler: its Domain option).
	HeaderDomain = "Fencing-Domain"
	// HeaderSequencer carries the grant's sequencer, for a resource that
	// verifies one (package sequencer).
	HeaderSequencer = "Fencing-Sequencer"
)

// CodeInternal is the error code of a failure inside the resource.
const CodeInternal = "internal"

// ErrorBody is the JSON body of every error answer. Error is a wire code
// (fencelock.Code); Domain, Token and Highest are set for a stale token.
type ErrorBody struct {
	Error   string          `json:"error"`
	Message string          `json:"message,omitempty"`
	Domain  string          `json:"domain,omitempty"`
	Token   fencelock.Token `json:"token,omitempty"`
	Highest fencelock.Token `json:"highest,omitempty"`
	// Reason says why a sequencer was refused (sequencer.Reason).
	Reason string `json:"reason,omitempty"`
}

// Status maps an error to the HTTP status of its answer: 409 for a stale
// token, 428 for a missing one, 412 for a failed precondition, 413 for a
// body too large, 401 without a valid credential, 403 for a refused
// sequencer or permission, 404 for not found, 400 for malformed input, 503
// when the resource cannot take it now, 500 else.
func Status(err error) int {
	switch {
	case errors.Is(err, fencelock.ErrStaleToken):
		return http.StatusConflict
	case errors.Is(err, fencelock.ErrMissingToken):
		return http.StatusPreconditionRequired
	case errors.Is(err, fencelock.ErrPreconditionFailed):
		return http.StatusPreconditionFailed
	case errors.Is(err, fencelock.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, fencelock.ErrInvalidSequencer), errors.Is(err, fencelock.ErrPermissionDenied):
		return http.StatusForbidden
	case errors.Is(err, fencelock.ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, fencelock.ErrUnavailable):
		return http.StatusServiceUnavailable
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

// Body returns the ErrorBody of err.
func Body(err error) ErrorBody {
	body := ErrorBody{Error: fencelock.Code(err), Message: err.Error(), Reason: sequencer.Reason(err)}
	if body.Error == "" {
		body.Error = CodeInternal
	}
	var stale *fencelock.StaleTokenError
	if errors.As(err, &stale) {
		body.Domain, body.Token, body.Highest = stale.Domain, stale.Token, stale.Highest
	}
	return body
}

// WriteError answers err: Status(err) and its ErrorBody as JSON.
func WriteError(w http.ResponseWriter, err error) {
	b, _ := json.Marshal(Body(err)) // a plain struct: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(Status(err))
	_, _ = w.Write(b)
}

// ParseToken reads the one Fencing-Token header of h. No header is an error
// wrapping fencelock.ErrMissingToken; several, or a malformed one,
// fencelock.ErrInvalidToken.
func ParseToken(h http.Header) (fencelock.Token, error) {
	vals := h.Values(HeaderToken)
	switch len(vals) {
	case 0:
		return 0, fmt.Errorf("the write has no %s header; send the fencing token of your lock grant: %w", HeaderToken, fencelock.ErrMissingToken)
	case 1:
	default:
		return 0, fmt.Errorf("%d %s headers, send one: %w", len(vals), HeaderToken, fencelock.ErrInvalidToken)
	}
	tok, err := fencelock.ParseToken(strings.TrimSpace(vals[0]))
	if err != nil {
		return 0, fmt.Errorf("%s header: %w", HeaderToken, err)
	}
	return tok, nil
}

// ParseDomain reads the Fencing-Domain header of h; ok is false if there is
// none. Several are an error wrapping fencelock.ErrInvalidName. The domain
// is not validated (fence.ValidateDomain).
func ParseDomain(h http.Header) (domain string, ok bool, err error) {
	d := h.Values(HeaderDomain)
	switch len(d) {
	case 0:
		return "", false, nil
	case 1:
		return d[0], true, nil
	}
	return "", false, fmt.Errorf("%d %s headers, send one: %w", len(d), HeaderDomain, fencelock.ErrInvalidName)
}

// Error is an error answer other than a stale token (which comes back as a
// *fencelock.StaleTokenError). errors.Is matches it against the sentinel of
// its wire code, and, without a known code, against fencelock.ErrNotFound
// for a 404 and fencelock.ErrUnavailable for a 5xx answer.
type Error struct {
	StatusCode int    // the HTTP status
	Code       string // the wire code, see fencelock.Code; "" if the body had none
	Message    string // the resource's explanation
	Reason     string // why a sequencer was refused, see sequencer.Reason
}

// Error describes the answer.
func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("resource answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	return fmt.Sprintf("resource answered %d: %s", e.StatusCode, e.Message)
}

// Unwrap returns the sentinel error of e's code (for a refused sequencer,
// the refusal of its reason), or nil.
func (e *Error) Unwrap() error {
	if err := sequencer.ForReason(e.Reason); err != nil && e.Code == fencelock.CodeInvalidSequencer {
		return err
	}
	if err := fencelock.ErrorForCode(e.Code); err != nil {
		return err
	}
	switch {
	case e.StatusCode == http.StatusNotFound:
		return fencelock.ErrNotFound
	case e.StatusCode >= 500:
		return fencelock.ErrUnavailable
	}
	return nil
}

// DecodeError turns an error answer back into the error it stands for.
func DecodeError(status int, body []byte) error {
	var eb ErrorBody
	_ = json.Unmarshal(body, &eb) // a body that is not ours leaves eb empty
	if eb.Error == fencelock.CodeStaleToken {
		return &fencelock.StaleTokenError{Domain: eb.Domain, Token: eb.Token, Highest: eb.Highest}
	}
	return &Error{StatusCode: status, Code: eb.Error, Message: eb.Message, Reason: eb.Reason}
}

// maxErrorBody bounds the error body ResponseError reads.
const maxErrorBody = 64 << 10

// ResponseError returns nil for a 2xx answer, and otherwise the error its
// body stands for (DecodeError), reading at most 64 KiB of it. It does not
// close the body.
func ResponseError(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return DecodeError(resp.StatusCode, body)
}
