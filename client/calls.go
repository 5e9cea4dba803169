package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencelock/fencelock"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// Renew extends a grant's lease by its TTL and returns the TTL. Most
// programs never call it: a Lock renews itself. It is for scripts that hold
// a grant across processes. Errors: fencelock.ErrNotHolder,
// fencelock.ErrLeaseExpired, fencelock.ErrUnavailable.
func (c *Client) Renew(ctx context.Context, name string, id fencelock.LeaseID, token fencelock.Token) (time.Duration, error) {
	resp, err := c.renew(ctx, name, id, token, false)
	return resp.GetTtl().AsDuration(), err
}

// renew is Renew; with seq, the answer carries a new sequencer.
func (c *Client) renew(ctx context.Context, name string, id fencelock.LeaseID, token fencelock.Token, seq bool) (*fencelockv1.RenewResponse, error) {
	if err := fencelock.LockName(name).Validate(); err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	var resp *fencelockv1.RenewResponse
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		var err error
		resp, err = ep.node.renew(ctx, &fencelockv1.RenewRequest{Name: name, LeaseId: string(id), Token: uint64(token), NoSequencer: !seq})
		return err
	})
	if err != nil {
		return nil, opError("renew", err)
	}
	return resp, nil
}

// Release ends a grant by its name, lease id and token. Lock.Release calls
// it. Errors: fencelock.ErrNotHolder if that grant is not current.
func (c *Client) Release(ctx context.Context, name string, id fencelock.LeaseID, token fencelock.Token) error {
	return c.release(ctx, name, id, token, true)
}

// release is Release. With heldTill (the holder believed in the lease
// until now), a NotHolder answer after an attempt whose outcome is unknown
// counts as that attempt's success; without it (the lease was already
// lost), the grant may as well have ended by expiry, and NotHolder is
// returned.
func (c *Client) release(ctx context.Context, name string, id fencelock.LeaseID, token fencelock.Token, heldTill bool) error {
	if err := fencelock.LockName(name).Validate(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	unknown := false // an earlier attempt may have released it without our hearing
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		err := ep.node.release(ctx, &fencelockv1.ReleaseRequest{Name: name, LeaseId: string(id), Token: uint64(token)})
		if err != nil && (ctx.Err() != nil || errors.Is(err, fencelock.ErrUnavailable)) {
			unknown = true
		}
		return err
	})
	if err != nil && unknown && heldTill && errors.Is(err, fencelock.ErrNotHolder) {
		return nil
	}
	if err != nil {
		return opError("release", err)
	}
	return nil
}

// opError names the operation op in err, unless the service's message
// already begins with it ("release \"x\" token 3: not the lock holder").
func opError(op string, err error) error {
	if strings.HasPrefix(err.Error(), op+" ") {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}

func lockInfo(m *fencelockv1.LockInfo) fencelock.LockInfo {
	li := fencelock.LockInfo{Name: fencelock.LockName(m.Name), Holder: m.Holder, Token: fencelock.Token(m.Token), TTL: m.Ttl.AsDuration()}
	if m.Expires != nil {
		li.Expires = m.Expires.AsTime()
	}
	if m.Acquired != nil {
		li.Acquired = m.Acquired.AsTime()
	}
	for _, w := range m.Waiters {
		li.Waiters = append(li.Waiters, fencelock.WaiterInfo{Holder: w.Holder, TTL: w.Ttl.AsDuration()})
	}
	li.WaiterCount = int(m.WaiterCount)
	return li
}

// Describe returns the named lock's holder, token, expiry and waiters.
// Errors: fencelock.ErrNotFound when nobody holds or waits for it.
func (c *Client) Describe(ctx context.Context, name string) (fencelock.LockInfo, error) {
	if err := fencelock.LockName(name).Validate(); err != nil {
		return fencelock.LockInfo{}, fmt.Errorf("describe: %w", err)
	}
	var li fencelock.LockInfo
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		m, err := ep.node.describe(ctx, name)
		if err != nil {
			return err
		}
		li = lockInfo(m)
		return nil
	})
	if errors.Is(err, fencelock.ErrNotFound) {
		return fencelock.LockInfo{}, err // the service's message names the lock
	}
	if err != nil {
		return fencelock.LockInfo{}, fmt.Errorf("describe %q: %w", name, err)
	}
	return li, nil
}

// List returns one page of the locks whose names start with prefix, and the
// token of the next page ("" after the last). Pass "" as pageToken for the
// first page; pageSize 0 means the service's default.
func (c *Client) List(ctx context.Context, prefix, pageToken string, pageSize int) ([]fencelock.LockInfo, string, error) {
	if pageSize < 0 {
		return nil, "", fmt.Errorf("list: page size %d: %w", pageSize, fencelock.ErrInvalidArgument)
	}
	if !utf8.ValidString(prefix) || !utf8.ValidString(pageToken) {
		return nil, "", fmt.Errorf("list: prefix and page token must be UTF-8: %w", fencelock.ErrInvalidArgument)
	}
	var out []fencelock.LockInfo
	var next string
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.node.list(ctx, &fencelockv1.ListRequest{
			Prefix: prefix, PageToken: pageToken, PageSize: uint32(min(pageSize, 1<<31))})
		if err != nil {
			return err
		}
		out = out[:0]
		for _, m := range resp.Locks {
			out = append(out, lockInfo(m))
		}
		next = resp.NextPageToken
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("list %q: %w", prefix, err)
	}
	return out, next, nil
}
