package httpfence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

var _ fence.Resource = (*Client)(nil)

// MaxValueLen is the largest value a Client reads, in bytes.
const MaxValueLen = 64 << 20

// Client is a fence.Resource over the contract: Put is PUT {base}/{key}
// with Fencing-Token and Fencing-Domain, Get is GET {base}/{key} (404: not
// found), and, with fence endpoints (WithFences), Check is POST and Highest
// GET {fences}/{domain}. Versions are 0. It is what "fencelock conformance"
// drives.
type Client struct {
	base, fences string
	hc           *http.Client
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithFences names the base URL of the resource's fence endpoints
// (FencesHandler); without it, Check and Highest return errors wrapping
// errors.ErrUnsupported.
func WithFences(base string) ClientOption {
	return func(c *Client) { c.fences = strings.TrimSuffix(base, "/") }
}

// WithClient sets the HTTP client (http.DefaultClient by default). The
// Client never follows redirects: a redirected write did not happen.
func WithClient(hc *http.Client) ClientOption { return func(c *Client) { c.hc = hc } }

// NewClient returns a Client of the resource whose values live under base.
func NewClient(base string, opts ...ClientOption) (*Client, error) {
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("httpfence client: base URL %q: want http(s)://HOST/PATH: %w", base, fencelock.ErrInvalidArgument)
	}
	c := &Client{base: strings.TrimSuffix(base, "/"), hc: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	return c, nil
}

// escapePath escapes each segment of a key or domain, keeping its slashes.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// do sends req and returns the answer's body (at most limit bytes) if it
// is 2xx, and the error it stands for otherwise (a redirect is one).
func (c *Client) do(req *http.Request, limit int64) ([]byte, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", req.Method, req.URL.Redacted(), fencelock.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if err := ResponseError(resp); err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err == nil && int64(len(body)) > limit {
		err = fmt.Errorf("answer over %d bytes: %w", limit, fencelock.ErrTooLarge)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	return body, nil
}

func (c *Client) write(ctx context.Context, method, url, domain string, token fencelock.Token, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", fencelock.ErrInvalidArgument, err)
	}
	if token != 0 {
		req.Header.Set(HeaderToken, token.String())
	}
	req.Header.Set(HeaderDomain, domain)
	return c.do(req, maxWriteAnswer)
}

// maxWriteAnswer bounds the answer to a write a Client reads.
const maxWriteAnswer = 64 << 10

// Put writes value to {base}/{key}, fenced by token in domain.
func (c *Client) Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (int64, error) {
	_, err := c.write(ctx, http.MethodPut, c.base+"/"+escapePath(key), domain, token, value)
	return 0, err
}

// Get reads {base}/{key}.
func (c *Client) Get(ctx context.Context, key string) ([]byte, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/"+escapePath(key), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", fencelock.ErrInvalidArgument, err)
	}
	body, err := c.do(req, MaxValueLen)
	return body, 0, err
}

var errNoFences = fmt.Errorf("the resource has no fence endpoints (httpfence.WithFences): %w", errors.ErrUnsupported)

// Check raises domain's highest token with POST {fences}/{domain}.
func (c *Client) Check(ctx context.Context, domain string, token fencelock.Token) error {
	if c.fences == "" {
		return errNoFences
	}
	_, err := c.write(ctx, http.MethodPost, c.fences+"/"+escapePath(domain), domain, token, nil)
	return err
}

// Highest reads domain's highest token with GET {fences}/{domain}.
func (c *Client) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	if c.fences == "" {
		return 0, errNoFences
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.fences+"/"+escapePath(domain), nil)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", fencelock.ErrInvalidArgument, err)
	}
	body, err := c.do(req, maxWriteAnswer)
	if err != nil {
		return 0, err
	}
	var fi FenceInfo
	if err := json.Unmarshal(body, &fi); err != nil {
		return 0, fmt.Errorf("GET %s/%s: not a fence answer: %w", c.fences, domain, err)
	}
	return fi.Highest, nil
}
