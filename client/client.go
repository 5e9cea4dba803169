package client

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
)

// Config configures a Client. Start from DefaultConfig.
type Config struct {
	// Endpoints are the API addresses of the service's nodes, as host:port
	// or http://host:port. The client fails over between them.
	Endpoints []string
	// Holder labels this client's grants (shown by Describe); default
	// hostname/pid.
	Holder string
	// HTTPClient carries the calls. By default the client carries Acquire,
	// Renew, Release and CancelWait on one Session stream per node over a
	// WebSocket (an HTTP/1.1 upgrade, over TLS when Config.TLS or https://
	// says so), and the other calls over HTTP/2 (h2c for http://
	// endpoints); a node that stops answering while calls are out on its
	// stream is found within about three seconds (pings on the stream, only
	// while calls are out). A node, or a proxy, that refuses the upgrade
	// gets unary calls, as below. A client of your own that speaks HTTP/2
	// to the nodes carries the Session stream on HTTP/2 instead. One that reaches a node only over HTTP/1.1 (an
	// http.Transport without h2c for http://, a proxy that speaks HTTP/1.1)
	// works too: the node refuses its first Session stream (505), and the
	// client then makes every call to that node as a unary call, one
	// connection per call in flight. Unary calls send no pings: a node that
	// freezes is found only when an attempt runs out (AttemptTimeout plus
	// the call's wait).
	HTTPClient *http.Client
	// RetryBackoff is the first pause before retrying a call whose outcome
	// was unknown; it doubles up to MaxRetryBackoff.
	RetryBackoff, MaxRetryBackoff time.Duration
	// RetryTimeout bounds how long one call keeps retrying when the service
	// is unreachable or leaderless, whatever the caller's context allows.
	// It counts from the call's first failure: an Acquire that waited in the
	// queue for longer is still retried when its node goes away.
	RetryTimeout time.Duration
	// AttemptTimeout bounds one attempt on one endpoint (plus the queue
	// wait, for Acquire), so that a node that hangs costs one attempt, not
	// the whole call. A node that froze is found sooner, by the stream's
	// pings.
	AttemptTimeout time.Duration
	// SilentFor is how long an endpoint that did not answer is skipped,
	// even when another node names it as the leader (its view may be
	// stale), unless no other endpoint is left.
	SilentFor time.Duration
	// Logger receives the client's logs (lease lost, retries).
	Logger *slog.Logger
	// Token, if set, is the caller's bearer token, sent with every call, for
	// a cluster that authenticates callers (serve --tokens-file); package
	// admin's calls send its admin token instead when it has one.
	Token string
	// TLS, if set, makes every endpoint HTTPS (host:port without a scheme
	// means https://host:port) with this configuration: the CA the nodes'
	// certificates chain to, and a client certificate for a cluster that
	// asks for one. Without it, https:// endpoints use the system's roots.
	TLS *tls.Config
}

// DefaultConfig returns a configuration for the given endpoints.
func DefaultConfig(endpoints ...string) Config {
	return Config{
		Endpoints:       endpoints,
		Holder:          defaultHolder(),
		RetryBackoff:    20 * time.Millisecond,
		MaxRetryBackoff: 250 * time.Millisecond,
		RetryTimeout:    30 * time.Second,
		AttemptTimeout:  5 * time.Second,
		SilentFor:       2 * time.Second,
		Logger:          discardLogger,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("client config: no endpoints: %w", fencelock.ErrInvalidArgument)
	}
	for _, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			return fmt.Errorf("client config: empty endpoint: %w", fencelock.ErrInvalidArgument)
		}
	}
	if c.RetryBackoff <= 0 || c.MaxRetryBackoff < c.RetryBackoff {
		return fmt.Errorf("client config: retry backoff must be positive and at most the max: %w", fencelock.ErrInvalidArgument)
	}
	if c.AttemptTimeout <= 0 {
		return fmt.Errorf("client config: attempt timeout must be positive: %w", fencelock.ErrInvalidArgument)
	}
	if c.RetryTimeout <= 0 {
		return fmt.Errorf("client config: retry timeout must be positive: %w", fencelock.ErrInvalidArgument)
	}
	if c.SilentFor < 0 {
		return fmt.Errorf("client config: silent-for must not be negative: %w", fencelock.ErrInvalidArgument)
	}
	if c.Logger == nil {
		return fmt.Errorf("client config: nil logger: %w", fencelock.ErrInvalidArgument)
	}
	return nil
}

// discardLogger is the default Config.Logger: a library logs nothing
// unless given a logger.
var discardLogger = slog.New(slog.DiscardHandler)

// Client talks to a fencelock service. It is safe for concurrent use; share
// one Client among the goroutines of a process.
type Client struct {
	cfg       Config
	hc        *http.Client
	dial      func(url string) node       // the transport; tests replace it
	eps       atomic.Pointer[[]*endpoint] // grows when a follower names a leader not listed
	epMu      sync.Mutex                  // serialises additions to eps
	next      atomic.Uint32               // index of the endpoint to try first
	close     func()
	closed    context.Context // ends at Close: work the client does in the background stops
	stop      context.CancelFunc
	takeBacks takeBacks
	born      time.Time // when the client was made: its renewals' grid (onRenewGrid)
	instance  string    // random, per Client: scopes its own request ids (ownRequestID)
}

// ownRequestID is the request id sent for the caller's id rid
// (WithRequestID): this client's instance and a hash of rid. Another
// Client, in this process or another, sends another id for the same rid,
// so it never gets this client's grant, place or cancel.
func (c *Client) ownRequestID(rid string) string {
	sum := sha256.Sum256([]byte(rid))
	return c.instance + ":" + hex.EncodeToString(sum[:16])
}

// New returns a client of the service at endpoints (host:port or URLs),
// with DefaultConfig.
func New(endpoints ...string) (*Client, error) {
	return NewFromConfig(DefaultConfig(endpoints...))
}

// NewFromConfig returns a client configured by cfg.
func NewFromConfig(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, hc: cfg.HTTPClient, close: func() {}, born: time.Now(), instance: string(fencelock.NewLeaseID())[:16]}
	c.closed, c.stop = context.WithCancel(context.Background())
	closeIdle := func() {} // the caller's HTTP client is the caller's to manage
	if c.hc == nil {
		tr := newTransport(cfg.TLS)
		c.hc, c.close = &http.Client{Transport: tr}, tr.(schemes).CloseIdleConnections
		closeIdle = c.close
	} else {
		hc := *c.hc
		hc.Transport = streamCheck{next: transportOf(c.hc)}
		c.hc = &hc
	}
	if cfg.Token != "" {
		hc := *c.hc
		hc.Transport = bearer{token: cfg.Token, next: transportOf(c.hc)}
		c.hc = &hc
	}
	ownTransport := cfg.HTTPClient == nil
	c.dial = func(url string) node {
		var ws *wsDialer
		if ownTransport {
			ws = newWSDialer(url, cfg.TLS, cfg.Token)
		}
		return newSessionNode(newConnectNode(c.hc, url), closeIdle, ws)
	}
	var eps []*endpoint
	for _, e := range cfg.Endpoints {
		eps = append(eps, c.newEndpoint(c.endpointURL(e)))
	}
	c.eps.Store(&eps)
	return c, nil
}

// bearer adds the caller's token to every request that carries none.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") != "" {
		return b.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func transportOf(hc *http.Client) http.RoundTripper {
	if hc.Transport != nil {
		return hc.Transport
	}
	return http.DefaultTransport
}

// endpointURL returns e as a URL without a trailing slash: https:// for a
// host:port with Config.TLS, http:// without.
func (c *Client) endpointURL(e string) string {
	u := strings.TrimRight(strings.TrimSpace(e), "/")
	if !strings.Contains(u, "://") {
		u = c.scheme() + u
	}
	return u
}

func (c *Client) scheme() string {
	if c.cfg.TLS != nil {
		return "https://"
	}
	return "http://"
}

// Close ends the client's streams and closes its idle connections; calls
// still out fail. Held locks are not released.
func (c *Client) Close() error {
	c.stop()
	for _, ep := range *c.eps.Load() {
		if s, ok := ep.node.(interface{ close() }); ok {
			s.close()
		}
	}
	c.close()
	return nil
}

// retryable reports whether a call may be repeated, possibly on another
// endpoint: the node was not the leader, or the outcome is unknown.
func retryable(err error) bool {
	return errors.Is(err, fencelock.ErrNotLeader) || errors.Is(err, fencelock.ErrUnavailable)
}

// call runs fn against the endpoints until it succeeds, fails for good, the
// retry timeout passes, or ctx ends: it rotates on retryable errors with
// backoff, jumps to the leader a follower names, and skips for SilentFor an
// endpoint that did not answer. Each attempt may take AttemptTimeout plus
// extra. Calls must be idempotent (Acquire carries a request id for this).
func (c *Client) call(ctx context.Context, extra time.Duration, fn func(ctx context.Context, ep *endpoint) error) error {
	backoff := c.cfg.RetryBackoff
	var giveUp time.Time // set at the first failure: an attempt may rightly last long (a wait)
	for attempt := 0; ; attempt++ {
		ep, i := c.pick()
		err := c.attempt(ctx, ep, extra, fn)
		if err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(c.cfg.RetryTimeout)
		} else if time.Now().After(giveUp) {
			return fmt.Errorf("gave up after %v of retries: %w", c.cfg.RetryTimeout, err)
		}
		c.cfg.Logger.Debug("call failed; retrying", "endpoint", ep.host, "attempt", attempt+1, "err", err)
		if c.follow(err, i) {
			continue
		}
		if attempt%len(*c.eps.Load()) == len(*c.eps.Load())-1 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, c.cfg.MaxRetryBackoff)
		}
	}
}

// attempt runs fn once on ep; an endpoint that does not answer in time, or
// at all, is marked silent (not for a call the client held back).
func (c *Client) attempt(ctx context.Context, ep *endpoint, extra time.Duration, fn func(context.Context, *endpoint) error) error {
	limit := c.cfg.AttemptTimeout + extra
	actx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := fn(actx, ep)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		if errors.Is(err, errHeldBack) {
			return fmt.Errorf("%s: %w within %v: %w", ep.host, errHeldBack, limit, fencelock.ErrUnavailable)
		}
		err = fmt.Errorf("%s did not answer within %v: %w", ep.host, limit, fencelock.ErrUnavailable)
		ep.silence(c.cfg.SilentFor)
	} else if errors.Is(err, wire.ErrNoAnswer) {
		ep.silence(c.cfg.SilentFor)
	}
	return err
}

// follow moves the next attempt on after a failure on endpoint i: to the
// leader a not_leader answer names, unless that endpoint is silent, or else
// to the next endpoint. It reports whether it followed a hint.
func (c *Client) follow(err error, i int) bool {
	var nl *fencelock.NotLeaderError
	if errors.As(err, &nl) && nl.LeaderAPI != "" {
		j := c.endpointOf(nl.LeaderAPI)
		if eps := *c.eps.Load(); j != i && !eps[j].silent() {
			c.next.Store(uint32(j))
			return true
		}
	}
	eps := *c.eps.Load()
	c.next.CompareAndSwap(uint32(i), uint32((i+1)%len(eps)))
	return false
}

// pick returns the endpoint to try next and its index: the first one from
// c.next on that is not silent, or c.next's if all are.
func (c *Client) pick() (*endpoint, int) {
	eps := *c.eps.Load()
	start := int(c.next.Load()) % len(eps)
	for k := range eps {
		if i := (start + k) % len(eps); !eps[i].silent() {
			return eps[i], i
		}
	}
	return eps[start], start
}

// endpoint is one node's API.
type endpoint struct {
	host        string // host:port
	url         string
	node        node
	silentUntil atomic.Int64 // unix ns; the node did not answer until then
}

func (c *Client) newEndpoint(u string) *endpoint {
	return &endpoint{host: u[strings.Index(u, "://")+3:], url: u, node: c.dial(u)}
}

// silence marks ep as silent for d.
func (ep *endpoint) silence(d time.Duration) { ep.silentUntil.Store(time.Now().Add(d).UnixNano()) }

// silent reports whether ep did not answer lately.
func (ep *endpoint) silent() bool { return time.Now().UnixNano() < ep.silentUntil.Load() }

// endpointOf returns the index of the endpoint at host:port addr, adding it
// when the client does not know it yet.
func (c *Client) endpointOf(addr string) int {
	c.epMu.Lock()
	defer c.epMu.Unlock()
	eps := *c.eps.Load()
	for i, ep := range eps {
		if ep.host == addr {
			return i
		}
	}
	grown := append(append([]*endpoint(nil), eps...), c.newEndpoint(c.scheme()+addr))
	c.eps.Store(&grown)
	return len(grown) - 1
}

func defaultHolder() string {
	h, err := os.Hostname()
	if err != nil {
		h = "unknown"
	}
	return fmt.Sprintf("%s/%d", h, os.Getpid())
}
