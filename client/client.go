package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

// Config configures a Client. Start from DefaultConfig.
type Config struct {
	// Endpoints are the API addresses of the service's nodes, as host:port
	// or http://host:port. The client fails over between them.
	Endpoints []string
	// Holder labels this client's grants (shown by Describe); default
	// hostname/pid.
	Holder string
	// HTTPClient carries the calls; default a pooled client sized for many
	// concurrent locks.
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
	// wait, for Acquire), so that a node that hangs (paused, partitioned)
	// costs one attempt, not the whole call.
	AttemptTimeout time.Duration
	// Logger receives the client's logs (lease lost, retries).
	Logger *slog.Logger
	// AdminToken is sent with membership changes (AddMember, RemoveMember,
	// TransferLeader) to a cluster started with an admin token.
	AdminToken string
	// NoBatch sends every call as its own request. By default, Acquire,
	// Renew and Release calls made concurrently through one Client travel
	// together in Batch requests (see Batch in the API), which multiplies
	// throughput when many goroutines lock at once and costs a lone caller
	// nothing.
	NoBatch bool
	// NoPipe sends batches as Connect Batch requests. By default, batches
	// (and Acquire and Release calls sent alone) travel on the pipe, one
	// upgraded HTTP/1.1 connection per node that carries them as frames,
	// many at once; it costs a fraction of an HTTP request per call. The
	// pipe is used only for http:// endpoints; a node that refuses it gets
	// Connect requests.
	NoPipe bool
}

// DefaultConfig returns a configuration for the given endpoints.
func DefaultConfig(endpoints ...string) Config {
	return Config{
		Endpoints:       endpoints,
		Holder:          defaultHolder(),
		RetryBackoff:    20 * time.Millisecond,
		MaxRetryBackoff: time.Second,
		RetryTimeout:    30 * time.Second,
		AttemptTimeout:  5 * time.Second,
		Logger:          slog.Default(),
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
	if c.Logger == nil {
		return fmt.Errorf("client config: nil logger: %w", fencelock.ErrInvalidArgument)
	}
	return nil
}

// Client talks to a fencelock service. It is safe for concurrent use.
type Client struct {
	cfg   Config
	eps   atomic.Pointer[[]*endpoint] // grows when a follower names a leader not listed
	epMu  sync.Mutex                  // serialises additions to eps
	hc    *http.Client
	rt    http.RoundTripper // opens pipes
	next  atomic.Uint32     // index of the endpoint to try first
	close func()
	// heldIDs: request ids of callers that gave up that may still be
	// taken back (see holdRequestID).
	heldMu  sync.Mutex
	heldIDs map[string]*heldID
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
	hc := cfg.HTTPClient
	closeIdle := func() {}
	var rt http.RoundTripper = http.DefaultTransport
	if hc != nil && hc.Transport != nil {
		rt = hc.Transport
	}
	if hc == nil {
		tr := &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
		}
		hc = &http.Client{Transport: tr}
		closeIdle = tr.CloseIdleConnections
		rt = tr
	}
	c := &Client{cfg: cfg, close: closeIdle, hc: hc, rt: rt}
	var eps []*endpoint
	for _, e := range cfg.Endpoints {
		u := strings.TrimRight(strings.TrimSpace(e), "/")
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		eps = append(eps, c.newEndpoint(u))
	}
	c.eps.Store(&eps)
	return c, nil
}

// Close closes the client's connections; calls still out on a pipe fail.
// Held locks are not released.
func (c *Client) Close() error {
	for _, ep := range *c.eps.Load() {
		if ep.pipe != nil {
			ep.pipe.close()
		}
	}
	c.close()
	return nil
}

// retryable reports whether a call may be repeated, possibly on another
// endpoint: the node was not the leader, or the outcome is unknown.
func retryable(err error) bool {
	if errors.Is(err, fencelock.ErrNotLeader) || errors.Is(err, fencelock.ErrUnavailable) {
		return true
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code() == connect.CodeUnavailable || ce.Code() == connect.CodeUnknown && isNetErr(err)
	}
	return isNetErr(err)
}

func isNetErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe)
}

// call runs fn against the endpoints, rotating on retryable errors with
// backoff and jumping to the leader a follower names, until it succeeds,
// fails for good, the retry timeout passes, or ctx ends. Calls must be
// idempotent (Acquire carries a request id for this).
func (c *Client) call(ctx context.Context, fn func(context.Context, fencelockv1connect.LockServiceClient) error) error {
	return c.callAt(ctx, 0, func(ctx context.Context, ep *endpoint) error { return fn(ctx, ep.lock) })
}

// callAt is call for either service; each attempt may take AttemptTimeout
// plus extra.
func (c *Client) callAt(ctx context.Context, extra time.Duration, fn func(ctx context.Context, ep *endpoint) error) error {
	backoff := c.cfg.RetryBackoff
	var giveUp time.Time     // set at the first failure: an attempt may rightly last long (a wait)
	failed := map[int]bool{} // endpoints that did not answer in this call
	for attempt := 0; ; attempt++ {
		eps := *c.eps.Load()
		cur := c.next.Load()
		i := int(cur) % len(eps)
		actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout+extra)
		err := wire.FromConnect(fn(actx, eps[i]))
		if err != nil && actx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%s did not answer within %v: %w", eps[i].host, c.cfg.AttemptTimeout+extra, fencelock.ErrUnavailable)
		}
		cancel()
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
		c.cfg.Logger.Debug("call failed; retrying", "endpoint", eps[i].host, "attempt", attempt+1, "err", err)
		var nl *wire.NotLeaderError
		if errors.As(err, &nl) && nl.Leader != "" {
			// Follow the redirect, unless that node already failed to answer
			// in this call: a follower's view of the leader may be stale.
			if j := c.endpointOf(nl.Leader); j != i && !failed[j] {
				c.next.Store(uint32(j))
				continue
			}
		} else {
			failed[i] = true
		}
		c.next.CompareAndSwap(cur, uint32((i+1)%len(eps)))
		if attempt%len(eps) == len(eps)-1 {
			clear(failed) // a full round: give every node another chance
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, c.cfg.MaxRetryBackoff)
		}
	}
}

// endpoint is one node's API, with a client of each service.
type endpoint struct {
	host    string // host:port
	lock    fencelockv1connect.LockServiceClient
	cluster fencelockv1connect.ClusterServiceClient
	batch   *batcher // nil with Config.NoBatch
	pipe    *pipe    // nil with Config.NoBatch or NoPipe, or for https
}

func (c *Client) newEndpoint(u string) *endpoint {
	ep := &endpoint{host: u[strings.Index(u, "://")+3:],
		lock:    fencelockv1connect.NewLockServiceClient(c.hc, u),
		cluster: fencelockv1connect.NewClusterServiceClient(c.hc, u)}
	if !c.cfg.NoBatch {
		ep.batch = &batcher{rpc: ep.sendBatch, timeout: c.cfg.AttemptTimeout}
		if !c.cfg.NoPipe && strings.HasPrefix(u, "http://") {
			ep.pipe = &pipe{url: u, rt: c.rt, lateWait: c.cfg.AttemptTimeout, stall: min(maxPipeStall, c.cfg.AttemptTimeout)}
		}
	}
	return ep
}

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
	grown := append(append([]*endpoint(nil), eps...), c.newEndpoint("http://"+addr))
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
