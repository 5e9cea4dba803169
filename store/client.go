package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/httpfence"
)

var _ fencelock.Fence = (*Client)(nil)

// Client talks to a fenced object store over HTTP. It is safe for concurrent
// use. Its errors keep their identity across the wire: a stale token is a
// *fencelock.StaleTokenError, other refusals are *Error values that
// errors.Is matches against fencelock's sentinels (ErrMissingToken,
// ErrInvalidToken, ErrInvalidName, ErrTooLarge, ErrPreconditionFailed,
// ErrNotFound, ErrInvalidArgument; and, from a store with a policy,
// ErrUnauthenticated and ErrPermissionDenied). When the request or its answer is lost in
// transit the error wraps fencelock.ErrUnavailable: the write may or may not
// have been applied, and retrying it with the same idempotency key is safe.
type Client struct {
	base      string // scheme://host[:port][/prefix], no trailing slash
	hc        *http.Client
	sequencer func() string
	token     string
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the Client send its requests with hc instead of
// http.DefaultClient.
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) { c.hc = hc }
}

// WithToken makes every request carry token as its bearer credential, for
// a store with a tokens file (fencelock store --tokens-file).
func WithToken(token string) ClientOption {
	return func(c *Client) { c.token = token }
}

// WithSequencer makes every write (Put, Delete, Check) carry the sequencer
// seq returns, e.g. a held lock's Sequencer method, for a store that
// verifies them (fencelock store --sequencer-keys).
func WithSequencer(seq func() string) ClientOption {
	return func(c *Client) { c.sequencer = seq }
}

// NewClient returns a client of the store at baseURL, e.g.
// "http://127.0.0.1:7080". The error wraps fencelock.ErrInvalidArgument.
func NewClient(baseURL string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("new store client: base URL %q must look like http://host:port: %w", baseURL, fencelock.ErrInvalidArgument)
	}
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), hc: http.DefaultClient}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// WriteOption qualifies one write.
type WriteOption func(*writeOptions)

type writeOptions struct {
	domain, ifMatch, ifNoneMatch, idemKey string
}

// WithDomain fences the write in domain (usually the lock name) instead of
// the object key, so that all the keys a critical section writes share one
// highest token.
func WithDomain(domain string) WriteOption {
	return func(o *writeOptions) { o.domain = domain }
}

// WithIfMatch applies the write only if the object's current ETag is etag
// (or, for "*", if the object exists); otherwise the store refuses it with
// fencelock.ErrPreconditionFailed.
func WithIfMatch(etag string) WriteOption {
	return func(o *writeOptions) { o.ifMatch = etag }
}

// WithCreateOnly applies the write only if the object does not exist yet
// (If-None-Match: *); otherwise the store refuses it with
// fencelock.ErrPreconditionFailed.
func WithCreateOnly() WriteOption {
	return func(o *writeOptions) { o.ifNoneMatch = "*" }
}

// WithIdempotencyKey makes the write apply at most once: a repeat with the
// same key returns the first answer again (success or refusal) without
// applying anything. Reusing a key for a different write is refused with
// fencelock.ErrInvalidArgument.
func WithIdempotencyKey(key string) WriteOption {
	return func(o *writeOptions) { o.idemKey = key }
}

// objectURL escapes key segment by segment, so that no "/" is lost and no
// ".." is resolved on the way.
func (c *Client) objectURL(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.base + objectsPrefix + strings.Join(segs, "/")
}

func (c *Client) fenceURL(domain string) string {
	segs := strings.Split(domain, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.base + fencesPrefix + strings.Join(segs, "/")
}

// do sends req and returns the answer; a non-2xx, non-304 answer becomes
// its error.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", fencelock.ErrUnavailable, err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotModified {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, httpfence.DecodeError(resp.StatusCode, body)
	}
	return resp, nil
}

func (c *Client) newWrite(ctx context.Context, method, url string, token fencelock.Token, body io.Reader, opts []WriteOption) (*http.Request, error) {
	var o writeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.domain != "" {
		if err := ValidateDomain(o.domain); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", fencelock.ErrInvalidArgument, err)
	}
	if token != 0 { // the store refuses a write without a token: let it say so
		req.Header.Set(httpfence.HeaderToken, token.String())
	}
	if c.sequencer != nil {
		req.Header.Set(httpfence.HeaderSequencer, c.sequencer())
	}
	for h, v := range map[string]string{httpfence.HeaderDomain: o.domain, "If-Match": o.ifMatch, "If-None-Match": o.ifNoneMatch, HeaderIdempotencyKey: o.idemKey} {
		if v != "" {
			req.Header.Set(h, v)
		}
	}
	return req, nil
}

// Put stores body under key, fenced by token: the store accepts it only if
// token is at least the highest token of the write's domain (the key, unless
// WithDomain says otherwise). It returns the new version's ObjectInfo, or a
// *fencelock.StaleTokenError if a newer holder has written, or an error
// wrapping fencelock.ErrMissingToken (token 0), ErrInvalidName (bad key or
// domain), ErrTooLarge, ErrPreconditionFailed or ErrUnavailable.
func (c *Client) Put(ctx context.Context, key string, token fencelock.Token, body io.Reader, opts ...WriteOption) (ObjectInfo, error) {
	if err := ValidateKey(key); err != nil {
		return ObjectInfo{}, fmt.Errorf("put object: %w", err)
	}
	if body == nil {
		body = http.NoBody
	}
	req, err := c.newWrite(ctx, http.MethodPut, c.objectURL(key), token, body, opts)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put object %q: %w", key, err)
	}
	resp, err := c.do(req)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put object %q: %w", key, err)
	}
	defer resp.Body.Close()
	var info ObjectInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return ObjectInfo{}, fmt.Errorf("put object %q: decode answer: %w: %w", key, fencelock.ErrUnavailable, err)
	}
	return info, nil
}

// Get returns the content of key and the version it belongs to (with the
// token and domain that wrote it). It returns an error wrapping
// fencelock.ErrNotFound if there is no such object.
func (c *Client) Get(ctx context.Context, key string) ([]byte, ObjectInfo, error) {
	if err := ValidateKey(key); err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get object: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.objectURL(key), nil)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get object %q: %w: %w", key, fencelock.ErrInvalidArgument, err)
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get object %q: %w", key, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get object %q: read body: %w: %w", key, fencelock.ErrUnavailable, err)
	}
	info := ObjectInfo{
		Key:    key,
		ETag:   resp.Header.Get("ETag"),
		Domain: resp.Header.Get(httpfence.HeaderDomain),
		Size:   int64(buf.Len()),
	}
	if tok := resp.Header.Get(httpfence.HeaderToken); tok != "" {
		v, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			return nil, ObjectInfo{}, fmt.Errorf("get object %q: %s header %q: %w", key, httpfence.HeaderToken, tok, fencelock.ErrInvalidToken)
		}
		info.Token = fencelock.Token(v)
	}
	return buf.Bytes(), info, nil
}

// Delete deletes key, fenced by token like Put. It returns an error wrapping
// fencelock.ErrNotFound if there is no such object, and Put's errors
// otherwise.
func (c *Client) Delete(ctx context.Context, key string, token fencelock.Token, opts ...WriteOption) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("delete object: %w", err)
	}
	req, err := c.newWrite(ctx, http.MethodDelete, c.objectURL(key), token, nil, opts)
	if err != nil {
		return fmt.Errorf("delete object %q: %w", key, err)
	}
	resp, err := c.do(req)
	if err != nil {
		return fmt.Errorf("delete object %q: %w", key, err)
	}
	_ = resp.Body.Close()
	return nil
}

// Check raises domain's highest token to token without writing an object
// (see fencelock.Fence): a new holder can call it right after acquiring the
// lock, so that the old holder is refused even before the new one writes.
func (c *Client) Check(ctx context.Context, domain string, token fencelock.Token) error {
	if err := ValidateDomain(domain); err != nil {
		return fmt.Errorf("check fence: %w", err)
	}
	req, err := c.newWrite(ctx, http.MethodPost, c.fenceURL(domain), token, nil, nil)
	if err != nil {
		return fmt.Errorf("check fence %q: %w", domain, err)
	}
	resp, err := c.do(req)
	if err != nil {
		return fmt.Errorf("check fence %q: %w", domain, err)
	}
	_ = resp.Body.Close()
	return nil
}

// Highest returns the highest token domain has accepted, or 0 if it has
// accepted none.
func (c *Client) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	if err := ValidateDomain(domain); err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.fenceURL(domain), nil)
	if err != nil {
		return 0, fmt.Errorf("read highest token of %q: %w: %w", domain, fencelock.ErrInvalidArgument, err)
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, fmt.Errorf("read highest token of %q: %w", domain, err)
	}
	defer resp.Body.Close()
	var info FenceInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return 0, fmt.Errorf("read highest token of %q: decode answer: %w: %w", domain, fencelock.ErrUnavailable, err)
	}
	return info.Highest, nil
}

// Resource returns c as a fence.Resource: Put writes value to key in domain
// (WithDomain), and versions are the store's commit sequence numbers, the
// numbers in its ETags.
func (c *Client) Resource() fence.Resource { return objects{c} }

type objects struct{ c *Client }

func (o objects) Check(ctx context.Context, domain string, token fencelock.Token) error {
	return o.c.Check(ctx, domain, token)
}

func (o objects) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	return o.c.Highest(ctx, domain)
}

func (o objects) Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (int64, error) {
	info, err := o.c.Put(ctx, key, token, bytes.NewReader(value), WithDomain(domain))
	if err != nil {
		return 0, err
	}
	return etagVersion(info.ETag), nil
}

func (o objects) Get(ctx context.Context, key string) ([]byte, int64, error) {
	body, info, err := o.c.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return body, etagVersion(info.ETag), nil
}

// etagVersion returns the commit sequence number in one of the store's
// ETags, or 0 for an ETag that holds none.
func etagVersion(etag string) int64 {
	n, err := strconv.ParseInt(strings.Trim(etag, `"`), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
