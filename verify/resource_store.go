package verify

import (
	"context"
	"errors"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/store"
)

// storeResource is the fenced object store: one object per domain, its
// body the list (one element per line), its ETag the store's commit
// sequence number.
type storeResource struct {
	c *store.Client
}

var _ Resource = (*storeResource)(nil)

func openStoreResource(url string) (*storeResource, error) {
	c, err := store.NewClient(url)
	if err != nil {
		return nil, err
	}
	return &storeResource{c: c}, nil
}

func (s *storeResource) Fence(ctx context.Context, domain string, token fencelock.Token) error {
	return s.c.Check(ctx, domain, token)
}

func (s *storeResource) Read(ctx context.Context, domain string) ([]string, int64, error) {
	body, info, err := s.c.Get(ctx, domain)
	if errors.Is(err, fencelock.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return splitList(body), max(etagSeq(info.ETag), 0), nil
}

func (s *storeResource) Write(ctx context.Context, domain string, token fencelock.Token, list []string) (int64, error) {
	info, err := s.c.Put(ctx, domain, token, strings.NewReader(joinList(list)))
	if err != nil {
		return 0, err
	}
	return max(etagSeq(info.ETag), 0), nil
}

func (s *storeResource) Close() error { return nil }

func splitList(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func joinList(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return strings.Join(l, "\n") + "\n"
}
