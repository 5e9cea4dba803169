package httpfence

import (
	"fmt"
	"net/http"

	"github.com/fencelock/fencelock"
)

// Holder is a held lock as Transport sees it; *client.Lock is one.
type Holder interface {
	// Token returns the grant's fencing token.
	Token() fencelock.Token
	// Err returns nil while the lease is believed held, and why not after.
	Err() error
}

// Transport sends every request with a held lock's fencing token (and
// Domain, if set, as Fencing-Domain), and sends nothing once the lease is
// lost: RoundTrip then fails at once with the lock's Err. It does not
// interpret answers; ResponseError does.
type Transport struct {
	Base   http.RoundTripper // nil: http.DefaultTransport
	Lock   Holder
	Domain string
	// Sequencer: send the lock's latest sequencer too, as
	// Fencing-Sequencer, for a service that verifies one (WithVerifier).
	// Lock must then have a Sequencer() string method, as *client.Lock
	// has (acquire it with client.WithSequencer, or its first request
	// waits for a renewal that brings one).
	Sequencer bool
}

// RoundTrip sends a copy of req with the fencing headers.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.Lock.Err(); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("httpfence: %s %s not sent: %w", req.Method, req.URL.Redacted(), err)
	}
	out := req.Clone(req.Context())
	out.Header.Set(HeaderToken, t.Lock.Token().String())
	if t.Domain != "" {
		out.Header.Set(HeaderDomain, t.Domain)
	}
	if t.Sequencer {
		if sl, ok := t.Lock.(interface{ Sequencer() string }); ok {
			if seq := sl.Sequencer(); seq != "" {
				out.Header.Set(HeaderSequencer, seq)
			}
		}
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(out)
}
