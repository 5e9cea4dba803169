package client

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/fencelock/fencelock"
)

// Endpoints returns the client's endpoints as host:port.
func (c *Client) Endpoints() []string {
	var out []string
	for _, ep := range *c.eps.Load() {
		out = append(out, ep.host)
	}
	return out
}

// Call runs fn as the client runs its own calls: on the endpoints in turn
// until fn succeeds or fails for good, following a follower's answer to the
// leader, backing off, until Config.RetryTimeout. Each attempt may take
// Config.AttemptTimeout plus extra. fn gets the node's base URL and the
// client's HTTP client (with its TLS and token), and must be safe to
// repeat: an error wrapping fencelock.ErrNotLeader or
// fencelock.ErrUnavailable moves the call on, any other ends it. Package
// admin adds the cluster's administrative calls so.
func (c *Client) Call(ctx context.Context, extra time.Duration, fn func(ctx context.Context, hc *http.Client, url string) error) error {
	return c.call(ctx, extra, func(ctx context.Context, ep *endpoint) error { return fn(ctx, c.hc, ep.url) })
}

// CallNode runs fn once on the node at addr (host:port or URL; it need not
// be one of the client's endpoints).
func (c *Client) CallNode(ctx context.Context, addr string, fn func(ctx context.Context, hc *http.Client, url string) error) error {
	return fn(ctx, c.hc, c.endpointURL(addr))
}

// CheckSequencer asks the leader whether the sequencer's grant is still the
// lock's current one, and returns the lock's current token (0: free). A
// sequencer the cluster did not sign fails with an error wrapping
// fencelock.ErrInvalidSequencer.
func (c *Client) CheckSequencer(ctx context.Context, seq string) (current bool, token fencelock.Token, err error) {
	err = c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.node.checkSequencer(ctx, seq)
		if err != nil {
			return err
		}
		current, token = resp.Current, fencelock.Token(resp.Token)
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("check sequencer: %w", err)
	}
	return current, token, nil
}
