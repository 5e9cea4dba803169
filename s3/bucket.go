package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

// Limits of a Bucket.
const (
	// MaxKeyLen is the longest key, in bytes, so that its objects' names
	// stay within S3's 1,024 bytes; with the prefix and escaping, a key
	// whose object names would not fit is refused too.
	MaxKeyLen = 512
	// MaxValueLen is the largest value Put writes and Get reads, in bytes.
	MaxValueLen = 64 << 20
	// maxManifestBytes bounds a domain's manifest: a write that would
	// grow it beyond is refused, so the domain stays readable.
	maxManifestBytes = 16 << 20
	// maxCommitAttempts bounds the conditional writes of one commit that
	// lose to other writers.
	maxCommitAttempts = 100
	// maxOwners bounds the cache of keys' domains.
	maxOwners = 10000
)

var _ fence.Resource = (*Bucket)(nil)

// Bucket keeps fenced values in an S3 bucket under a prefix. It is safe for
// concurrent use, also by many processes: every write is a conditional
// write to its domain's manifest, so the bucket itself orders them.
type Bucket struct {
	api    *awss3.Client
	bucket string
	prefix string
	mu     sync.Mutex
	owners map[string]string // key → its domain, once read or created (it never changes)

	beforeWrite func() // tests: runs between reading a manifest and writing it
}

// New returns the fenced values of bucket under prefix (e.g. "fenced/"; ""
// for the bucket's root), reached through api.
func New(api *awss3.Client, bucket, prefix string) *Bucket {
	return &Bucket{api: api, bucket: bucket, prefix: prefix}
}

// manifest is the object that orders a domain's writes: its highest token,
// a sequence number raised by every write of it (so that no two versions
// have the same content, hence the same ETag), and where each key's value
// is.
type manifest struct {
	Token fencelock.Token  `json:"token"`
	Seq   int64            `json:"seq"`
	Keys  map[string]entry `json:"keys,omitempty"`
}

// entry is one key's current value: its data object and its version (the
// manifest's Seq when it was written).
type entry struct {
	Data    string `json:"data"`
	Version int64  `json:"version"`
}

func (b *Bucket) manifestName(domain string) string {
	return b.prefix + "fences/" + url.PathEscape(domain)
}

func (b *Bucket) ownerName(key string) string { return b.prefix + "keys/" + url.PathEscape(key) }

// dataName returns a name no other write uses.
func (b *Bucket) dataName(key string, token fencelock.Token) string {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	return b.prefix + "data/" + url.PathEscape(key) + "/" + strconv.FormatUint(uint64(token), 10) + "-" + hex.EncodeToString(nonce[:])
}

// validName checks that name (a key or domain, as what) makes object names
// S3 takes: not "." or ".." (a posix backend would resolve them), and short
// enough once escaped under the longest of the Bucket's folders.
func (b *Bucket) validName(what, name string) error {
	if name == "." || name == ".." {
		return fmt.Errorf("s3 fence: %s %q: %w", what, name, fencelock.ErrInvalidName)
	}
	if n := len(b.prefix) + len("data/") + len(url.PathEscape(name)) + len("/18446744073709551615-0123456789abcdef"); n > 1024 {
		return fmt.Errorf("s3 fence: %s %q makes object names of %d bytes, S3 takes 1024: %w", what, name, n, fencelock.ErrInvalidName)
	}
	return nil
}

func (b *Bucket) validateKey(key string) error {
	if err := fencelock.ValidateText("key", key, MaxKeyLen); err != nil {
		return fmt.Errorf("s3 fence: %w", err)
	}
	return b.validName("key", key)
}

func (b *Bucket) validateDomain(domain string) error {
	if err := fence.ValidateDomain(domain); err != nil {
		return fmt.Errorf("s3 fence: %w", err)
	}
	return b.validName("domain", domain)
}

// Check raises domain's highest token to token without writing a value.
func (b *Bucket) Check(ctx context.Context, domain string, token fencelock.Token) error {
	if err := b.validateDomain(domain); err != nil {
		return err
	}
	_, err := b.commit(ctx, domain, token, nil)
	return err
}

// Highest returns the highest token domain has accepted, or 0.
func (b *Bucket) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	if err := b.validateDomain(domain); err != nil {
		return 0, err
	}
	m, _, err := b.readManifest(ctx, domain)
	return m.Token, err
}

// Put stores value under key, fenced by token in domain. It writes the value
// to a data object of its own, then commits it to the domain's manifest
// with a conditional write; a refused or failed commit removes the data
// object again. A key belongs to the domain of its first write (attempted,
// even if refused): a write in another domain fails with an error wrapping
// fencelock.ErrInvalidArgument. The claim is made before the token is
// compared and is never removed; Bucket checks no caller's rights, so any
// caller that may write under the prefix can claim a free key for any
// domain.
func (b *Bucket) Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (int64, error) {
	if err := b.validateDomain(domain); err != nil {
		return 0, err
	}
	if err := b.validateKey(key); err != nil {
		return 0, err
	}
	if len(value) > MaxValueLen {
		return 0, fmt.Errorf("s3 fenced put of %q: %d bytes, the limit is %d: %w", key, len(value), MaxValueLen, fencelock.ErrTooLarge)
	}
	if token == 0 {
		return 0, fence.Refused("s3", fence.Admit(domain, 0, token))
	}
	if err := b.claim(ctx, key, domain); err != nil {
		return 0, err
	}
	data := b.dataName(key, token)
	if err := b.putObject(ctx, data, value, "", ""); err != nil { // a name of its own: no condition
		return 0, fmt.Errorf("s3 fenced put of %q: write data: %w", key, err)
	}
	var old string
	m, err := b.commit(ctx, domain, token, func(m *manifest) {
		old = m.Keys[key].Data
		m.Keys[key] = entry{Data: data, Version: m.Seq}
	})
	// A refused commit did not land (conditional writes are not retried
	// by the SDK, so a failed condition is never our own earlier write):
	// its data goes. An unknown outcome leaves it, an orphan at worst.
	if errors.Is(err, fencelock.ErrStaleToken) && m.Keys[key].Data != data {
		b.remove(data)
	}
	if err != nil {
		return 0, fmt.Errorf("s3 fenced put of %q: %w", key, err)
	}
	if old != "" && old != data {
		b.remove(old)
	}
	return m.Keys[key].Version, nil
}

// Get returns key's value and version.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, int64, error) {
	if err := b.validateKey(key); err != nil {
		return nil, 0, err
	}
	domain, err := b.owner(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("s3 get %q: %w", key, err)
	}
	for attempt := 0; ; attempt++ {
		m, _, err := b.readManifest(ctx, domain)
		if err != nil {
			return nil, 0, fmt.Errorf("s3 get %q: %w", key, err)
		}
		e, ok := m.Keys[key]
		if !ok {
			return nil, 0, fmt.Errorf("s3 get %q: %w", key, fencelock.ErrNotFound)
		}
		body, _, err := b.getObject(ctx, e.Data, MaxValueLen)
		if errors.Is(err, fencelock.ErrNotFound) && attempt < 5 {
			continue // a newer write replaced it after the manifest was read
		}
		if errors.Is(err, fencelock.ErrNotFound) {
			return nil, 0, fmt.Errorf("s3 get %q: its data object %s is missing: %w", key, e.Data, fencelock.ErrUnavailable)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("s3 get %q: %w", key, err)
		}
		return body, e.Version, nil
	}
}

// commit admits token for domain and, if change is not nil or token raises
// the domain's highest, writes the domain's manifest with change applied,
// conditional on the manifest read. A conflicting write makes it read again
// and retry. It returns the manifest written, or the last one read.
func (b *Bucket) commit(ctx context.Context, domain string, token fencelock.Token, change func(*manifest)) (manifest, error) {
	for attempt := 0; ; attempt++ {
		m, etag, err := b.readManifest(ctx, domain)
		if err != nil {
			return m, err
		}
		if err := fence.Admit(domain, m.Token, token); err != nil {
			return m, fence.Refused("s3", err)
		}
		if change == nil && token == m.Token {
			return m, nil // already the highest: nothing to write
		}
		m.Token, m.Seq = token, m.Seq+1
		if m.Keys == nil {
			m.Keys = map[string]entry{}
		}
		if change != nil {
			change(&m)
		}
		if b.beforeWrite != nil {
			b.beforeWrite()
		}
		err = b.writeManifest(ctx, domain, m, etag)
		if !errors.Is(err, errConflict) {
			return m, err
		}
		if attempt+1 == maxCommitAttempts {
			return m, fmt.Errorf("s3 fence: %d conditional writes of domain %q lost to others: %w", maxCommitAttempts, domain, fencelock.ErrUnavailable)
		}
		if err := backoff(ctx, attempt); err != nil {
			return m, err
		}
	}
}

// backoff waits a little longer after each lost race, up to 50 ms, or
// until ctx ends.
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(1+min(attempt, 50)) * time.Millisecond
	select {
	case <-ctx.Done():
		return fmt.Errorf("s3 fence: retry a conflicting write: %w", ctx.Err())
	case <-time.After(d):
		return nil
	}
}

// readManifest returns domain's manifest and its ETag ("" if it has none).
func (b *Bucket) readManifest(ctx context.Context, domain string) (manifest, string, error) {
	var m manifest
	body, etag, err := b.getObject(ctx, b.manifestName(domain), maxManifestBytes)
	if errors.Is(err, fencelock.ErrNotFound) {
		return m, "", nil
	}
	if err != nil {
		return m, "", fmt.Errorf("read manifest of domain %q: %w", domain, err)
	}
	if err := json.Unmarshal(body, &m); err != nil || etag == "" {
		return m, "", fmt.Errorf("read manifest of domain %q: not a manifest (%v, ETag %q): %w", domain, err, etag, fencelock.ErrUnavailable)
	}
	return m, etag, nil
}

// writeManifest writes m if the manifest's ETag is still etag, or if there
// is none when etag is "". It returns errConflict if another write came
// first.
func (b *Bucket) writeManifest(ctx context.Context, domain string, m manifest, etag string) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("write manifest of domain %q: %w", domain, err)
	}
	if len(body) > maxManifestBytes {
		return fmt.Errorf("write manifest of domain %q: %d keys make it over %d bytes: %w", domain, len(m.Keys), maxManifestBytes, fencelock.ErrTooLarge)
	}
	ifNoneMatch := ""
	if etag == "" {
		ifNoneMatch = "*"
	}
	if err := b.putObject(ctx, b.manifestName(domain), body, etag, ifNoneMatch, noRetry); err != nil {
		return fmt.Errorf("write manifest of domain %q: %w", domain, err)
	}
	return nil
}

// claim makes domain the owner of key, or checks that it is.
func (b *Bucket) claim(ctx context.Context, key, domain string) error {
	owner, err := b.owner(ctx, key)
	if errors.Is(err, fencelock.ErrNotFound) {
		err = b.putObject(ctx, b.ownerName(key), []byte(domain), "", "*", noRetry)
		if errors.Is(err, errConflict) { // another writer claimed it first
			owner, err = b.owner(ctx, key)
		} else if err == nil {
			owner = domain
			b.remember(key, domain)
		}
	}
	if err != nil {
		return fmt.Errorf("s3 fenced put of %q: read its domain: %w", key, err)
	}
	if owner != domain {
		return fmt.Errorf("s3 fenced put of %q in domain %q: the key belongs to domain %q: %w", key, domain, owner, fencelock.ErrInvalidArgument)
	}
	return nil
}

// owner returns the domain key belongs to.
func (b *Bucket) owner(ctx context.Context, key string) (string, error) {
	b.mu.Lock()
	d, ok := b.owners[key]
	b.mu.Unlock()
	if ok {
		return d, nil
	}
	body, _, err := b.getObject(ctx, b.ownerName(key), fence.MaxDomainLen)
	if err != nil {
		return "", err
	}
	b.remember(key, string(body))
	return string(body), nil
}

// remember caches key's domain, forgetting them all when the cache is full.
func (b *Bucket) remember(key, domain string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.owners == nil || len(b.owners) >= maxOwners {
		b.owners = make(map[string]string)
	}
	b.owners[key] = domain
}

// errConflict: a conditional write lost to another write.
var errConflict = errors.New("conditional write conflict")

// noRetry makes a call one attempt: an SDK retry of a conditional write
// that had been applied would fail its condition and pass for a lost race.
func noRetry(o *awss3.Options) { o.Retryer = aws.NopRetryer{} }

// putObject writes name, on the conditions ifMatch and ifNoneMatch if they
// are not "". A failed condition (412, or 409 ConditionalRequestConflict)
// returns an error wrapping errConflict; no answer, one wrapping
// fencelock.ErrUnavailable (the write may have been applied).
func (b *Bucket) putObject(ctx context.Context, name string, body []byte, ifMatch, ifNoneMatch string, opts ...func(*awss3.Options)) error {
	in := &awss3.PutObjectInput{
		Bucket:        aws.String(b.bucket),
		Key:           aws.String(name),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	}
	if ifNoneMatch != "" {
		in.IfNoneMatch = aws.String(ifNoneMatch)
	}
	_, err := b.api.PutObject(ctx, in, opts...)
	switch status(err) {
	case 0:
		return nil
	case http.StatusPreconditionFailed, http.StatusConflict:
		return fmt.Errorf("put %s: %w: %w", name, errConflict, err)
	case -1:
		return fmt.Errorf("put %s: %w: %w", name, fencelock.ErrUnavailable, err)
	}
	return fmt.Errorf("put %s: %w", name, err)
}

// getObject reads name (at most limit bytes, if limit > 0) and its ETag.
func (b *Bucket) getObject(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	out, err := b.api.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(name)})
	var ae smithy.APIError
	switch st := status(err); {
	case st == http.StatusNotFound && errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket":
		return nil, "", fmt.Errorf("get %s: bucket %s does not exist: %w: %w", name, b.bucket, fencelock.ErrInvalidArgument, err)
	case st == http.StatusNotFound:
		return nil, "", fmt.Errorf("get %s: %w", name, fencelock.ErrNotFound)
	case st == -1:
		return nil, "", fmt.Errorf("get %s: %w: %w", name, fencelock.ErrUnavailable, err)
	case err != nil:
		return nil, "", fmt.Errorf("get %s: %w", name, err)
	}
	defer out.Body.Close()
	var r io.Reader = out.Body
	if limit > 0 {
		r = io.LimitReader(out.Body, limit+1)
	}
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, "", fmt.Errorf("get %s: %w", name, err)
	}
	if limit > 0 && int64(len(body)) > limit {
		return nil, "", fmt.Errorf("get %s: larger than %d bytes: %w", name, limit, fencelock.ErrTooLarge)
	}
	return body, aws.ToString(out.ETag), nil
}

// remove deletes a data object nothing refers to, on a context of its own:
// a failure leaves an orphan under data/, which no read finds.
func (b *Bucket) remove(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = b.api.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(name)})
}

// status returns the HTTP status of an S3 error answer, 0 for nil, and -1
// for an error without an answer (the network, the context).
func status(err error) int {
	if err == nil {
		return 0
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return -1
}
