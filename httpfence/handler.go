package httpfence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/sequencer"
)

// Guard runs a write atomically with its fence check: fn's effect happens
// only if token is admitted for domain (fence.Admit), and token becomes the
// domain's highest only if fn returns nil. *fence.Memory is one, and
// postgres.Fence.Guard returns one whose fn runs in the fenced transaction.
type Guard interface {
	Do(ctx context.Context, domain string, token fencelock.Token, fn func(ctx context.Context) error) error
}

// Write is the fenced write a request carries.
type Write struct {
	Domain string
	Token  fencelock.Token
}

type writeKey struct{}

// FromContext returns the fenced write of the request whose context ctx is
// (or derives from), inside a Handler.
func FromContext(ctx context.Context) (Write, bool) {
	w, ok := ctx.Value(writeKey{}).(Write)
	return w, ok
}

// Limits of a Handler, by default.
const (
	// DefaultMaxResponse is the largest answer a Handler holds back, in
	// bytes.
	DefaultMaxResponse = 1 << 20
	// DefaultMaxBody is the largest write body a Handler reads, in bytes.
	DefaultMaxBody = 16 << 20
)

// Option configures a Handler.
type Option func(*handler)

// WithDomain makes the service name each write's fence domain (say, the
// lock name of the invoice a path names) instead of its clients: a
// Fencing-Domain header is then optional, and refused (400) if it names
// another domain. Without it, every write must name its domain in the
// header: all holders of a lock must send the same one (the lock's name,
// as Transport.Domain), or a write naming a domain nobody raised passes.
func WithDomain(domain func(r *http.Request) string) Option {
	return func(h *handler) { h.domain = domain }
}

// WithVerifier makes every write carry a Fencing-Sequencer that v verifies
// for the write's domain and token (403 invalid_sequencer otherwise), so
// that a token nobody was granted is refused: the domain must be the
// lock's name.
func WithVerifier(v *sequencer.Verifier) Option {
	return func(h *handler) { h.verifier = v }
}

// WithMaxBody sets the largest write body (DefaultMaxBody by default). The
// body is read before the guard runs, so a slow client does not hold the
// domain's lock; a larger one is answered 413.
func WithMaxBody(n int64) Option {
	return func(h *handler) { h.maxBody = n }
}

// WithMaxResponse sets the largest answer a write's handler may give
// (DefaultMaxResponse by default): it is held back until the guard commits.
func WithMaxResponse(n int) Option {
	return func(h *handler) { h.maxResponse = n }
}

type handler struct {
	guard       Guard
	next        http.Handler
	domain      func(r *http.Request) string // nil: the client names it
	maxResponse int
	maxBody     int64
	verifier    *sequencer.Verifier
}

// Handler makes next a fenced resource. Requests other than GET, HEAD and
// OPTIONS are writes: each must carry a Fencing-Token (428 without one, 400
// if malformed) and its Fencing-Domain (400 without one, unless
// WithDomain). Handler reads the body (WithMaxBody), then runs next inside
// guard.Do, with the Write in the request's context (FromContext): the
// token check and next's effect commit together, and a stale token is
// answered 409 with the contract's JSON body while next's effect rolls
// back. next's answer is held back until the guard has committed; an
// answer other than 2xx also rolls back, and goes out as next gave it.
//
// With a nil guard, Handler only checks the headers and puts the Write in
// the context: next then writes through a fence adapter itself (e.g.
// redis.Fence.Set with the Write's domain and token) and answers its
// errors with WriteError.
func Handler(guard Guard, next http.Handler, opts ...Option) http.Handler {
	h := &handler{guard: guard, next: next, maxResponse: DefaultMaxResponse, maxBody: DefaultMaxBody}
	for _, o := range opts {
		o(h)
	}
	return h
}

// errHandlerRefused: next answered other than 2xx.
var errHandlerRefused = errors.New("the handler refused the write")

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		h.next.ServeHTTP(w, r)
		return
	}
	wr, err := h.parse(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	if err := h.readBody(w, r); err != nil {
		WriteError(w, err)
		return
	}
	ctx := context.WithValue(r.Context(), writeKey{}, wr)
	if h.guard == nil {
		h.next.ServeHTTP(w, r.WithContext(ctx))
		return
	}
	held := &heldResponse{header: http.Header{}, max: h.maxResponse}
	err = h.guard.Do(ctx, wr.Domain, wr.Token, func(ctx context.Context) error {
		h.next.ServeHTTP(held, r.WithContext(ctx))
		switch {
		case held.overflow:
			return fmt.Errorf("the handler's answer is over %d bytes: %w", h.maxResponse, fencelock.ErrTooLarge)
		case held.status() < 200 || held.status() > 299:
			return errHandlerRefused
		}
		return nil
	})
	if err != nil && !errors.Is(err, errHandlerRefused) {
		WriteError(w, err)
		return
	}
	held.send(w)
}

func (h *handler) parse(r *http.Request) (Write, error) {
	tok, err := ParseToken(r.Header)
	if err != nil {
		return Write{}, err
	}
	domain, ok, err := ParseDomain(r.Header)
	if err != nil {
		return Write{}, err
	}
	switch {
	case h.domain != nil && ok && domain != h.domain(r):
		return Write{}, fmt.Errorf("%s %q: this write's domain is %q: %w", HeaderDomain, domain, h.domain(r), fencelock.ErrInvalidArgument)
	case h.domain != nil:
		domain = h.domain(r)
	case !ok:
		return Write{}, fmt.Errorf("the write has no %s header; send the lock's name: %w", HeaderDomain, fencelock.ErrInvalidName)
	}
	if err := fence.ValidateDomain(domain); err != nil {
		return Write{}, err
	}
	if h.verifier != nil {
		if _, err := h.verifier.VerifyWrite(r.Header.Get(HeaderSequencer), fencelock.LockName(domain), tok); err != nil {
			return Write{}, err
		}
	}
	return Write{Domain: domain, Token: tok}, nil
}

// readBody replaces r's body with its content, read in full up to the
// limit.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("the body is over %d bytes: %w", h.maxBody, fencelock.ErrTooLarge)
	}
	if err != nil {
		return fmt.Errorf("read the body: %w: %w", fencelock.ErrInvalidArgument, err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

// heldResponse keeps an answer until it may go out.
type heldResponse struct {
	header   http.Header
	code     int
	body     bytes.Buffer
	max      int
	overflow bool
}

func (h *heldResponse) Header() http.Header { return h.header }

func (h *heldResponse) WriteHeader(code int) {
	if h.code == 0 {
		h.code = code
	}
}

func (h *heldResponse) Write(p []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	if h.body.Len()+len(p) > h.max {
		h.overflow = true
		return 0, fmt.Errorf("answer over %d bytes: %w", h.max, fencelock.ErrTooLarge)
	}
	return h.body.Write(p)
}

func (h *heldResponse) status() int {
	if h.code == 0 {
		return http.StatusOK
	}
	return h.code
}

func (h *heldResponse) send(w http.ResponseWriter) {
	for k, v := range h.header {
		w.Header()[k] = v
	}
	w.WriteHeader(h.status())
	_, _ = w.Write(h.body.Bytes())
}
