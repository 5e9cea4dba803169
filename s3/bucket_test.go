package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// testBucket creates a bucket of the test's own on the test server and
// returns its URL for Open.
func testBucket(tb testing.TB) string { return fencelocktest.S3Bucket(tb, "fenced") }

func openBucket(tb testing.TB, spec string) *Bucket {
	tb.Helper()
	b, err := Open(tb.Context(), spec)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func target(tb testing.TB, spec string) fencelocktest.Target {
	return fencelocktest.Target{
		Resource: openBucket(tb, spec),
		Restart:  func(tb testing.TB) fencelocktest.Target { return target(tb, spec) },
	}
}

func TestBucket_Suite(t *testing.T) {
	spec := testBucket(t)
	fencelocktest.RunFenceSuite(t, func(tb testing.TB) fencelocktest.Target { return target(tb, spec) })
}

// TestServer_ConditionalWrites checks what the adapter relies on the server
// to enforce: If-None-Match: * refuses an existing object, If-Match refuses
// another ETag, and of many writers racing with one ETag exactly one wins.
func TestServer_ConditionalWrites(t *testing.T) {
	b := openBucket(t, testBucket(t))
	ctx := t.Context()
	if err := b.putObject(ctx, "obj", []byte("v1"), "", "*"); err != nil {
		t.Fatalf("create with If-None-Match *: %v", err)
	}
	if err := b.putObject(ctx, "obj", []byte("v2"), "", "*"); !errors.Is(err, errConflict) {
		t.Fatalf("If-None-Match * on an existing object returned %v, want a failed condition", err)
	}
	_, etag, err := b.getObject(ctx, "obj", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.putObject(ctx, "obj", []byte("v2"), `"0123456789abcdef0123456789abcdef"`, ""); !errors.Is(err, errConflict) {
		t.Fatalf("If-Match with another ETag returned %v, want a failed condition", err)
	}
	var wins, losses int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			err := b.putObject(ctx, "obj", fmt.Appendf(nil, "writer %d", i), etag, "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, errConflict):
				losses++
			default:
				t.Errorf("writer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if wins != 1 || losses != 15 {
		t.Fatalf("16 writers with If-Match %s: %d won, %d lost; want exactly 1 winner: the server does not make conditional writes atomic", etag, wins, losses)
	}
}

// TestBucket_ABA is the hazard of ETags that hash the content: a newer
// holder rewrites the very bytes a stale holder read, so the ETag the stale
// holder holds matches again. The server's own If-Match lets such a write
// through (shown first, on a plain object); the Bucket refuses the stale
// write in exactly that interleaving.
func TestBucket_ABA(t *testing.T) {
	spec := testBucket(t)
	stale, newer := openBucket(t, spec), openBucket(t, spec)
	ctx := t.Context()

	// A naive adapter: If-Match on the value object itself.
	if err := stale.putObject(ctx, "plain", []byte("report v1"), "", ""); err != nil {
		t.Fatal(err)
	}
	_, read, err := stale.getObject(ctx, "plain", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := newer.putObject(ctx, "plain", []byte("report v1"), "", ""); err != nil { // the same bytes again
		t.Fatal(err)
	}
	if err := stale.putObject(ctx, "plain", []byte("stale"), read, ""); err != nil {
		t.Fatalf("the naive conditional write was refused (%v): this server's ETags do not repeat, so the hazard is not shown", err)
	}

	// The Bucket: the stale holder (token 5) has read the domain's state
	// when the newer one (token 6) writes the very bytes already there.
	if _, err := stale.Put(ctx, "report", 5, "report.pdf", []byte("report v1")); err != nil {
		t.Fatal(err)
	}
	stale.beforeWrite = func() {
		stale.beforeWrite = nil
		if _, err := newer.Put(ctx, "report", 6, "report.pdf", []byte("report v1")); err != nil {
			t.Errorf("the newer holder's write: %v", err)
		}
	}
	_, err = stale.Put(ctx, "report", 5, "report.pdf", []byte("stale bytes"))
	var se *fencelock.StaleTokenError
	if !errors.As(err, &se) || se.Highest != 6 {
		t.Fatalf("the stale write returned %v, want a *fencelock.StaleTokenError with highest 6", err)
	}
	got, _, err := newer.Get(ctx, "report.pdf")
	if err != nil || !bytes.Equal(got, []byte("report v1")) {
		t.Fatalf("report.pdf holds %q (%v), want the newer holder's %q", got, err, "report v1")
	}
}

// TestBucket_layout: a refused write leaves no data object behind, a
// replaced one is removed, and a key stays in the domain of its first write.
func TestBucket_layout(t *testing.T) {
	b := openBucket(t, testBucket(t))
	ctx := t.Context()
	for _, tok := range []fencelock.Token{7, 8} {
		if _, err := b.Put(ctx, "d", tok, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Put(ctx, "d", 7, "k", []byte("stale")); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("stale Put returned %v", err)
	}
	out, err := b.api.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(b.prefix + "data/")})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range out.Contents {
		names = append(names, aws.ToString(o.Key))
	}
	if len(names) != 1 || !strings.Contains(names[0], "/8-") {
		t.Fatalf("data objects %q, want only the one of token 8", names)
	}
	if _, err := b.Put(ctx, "other", 9, "k", []byte("v")); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Put of k in another domain returned %v, want ErrInvalidArgument", err)
	}
	for _, bad := range []struct{ domain, key string }{
		{"d", strings.Repeat("k", MaxKeyLen+1)},
		{"d", strings.Repeat("é", MaxKeyLen/2)}, // within MaxKeyLen, too long once escaped
		{"d", ".."},
		{"..", "k2"},
		{strings.Repeat("d", 1000), "k2"},
	} {
		if _, err := b.Put(ctx, bad.domain, 8, bad.key, nil); !errors.Is(err, fencelock.ErrInvalidName) {
			t.Errorf("Put(domain %.20q, key %.20q) returned %v, want ErrInvalidName", bad.domain, bad.key, err)
		}
	}
	if _, err := b.Put(ctx, "d", 8, "big", make([]byte, MaxValueLen+1)); !errors.Is(err, fencelock.ErrTooLarge) {
		t.Fatalf("Put of a value over MaxValueLen returned %v, want ErrTooLarge", err)
	}
	missing := New(b.api, "no-such-bucket-fencelock", "")
	if _, err := missing.Highest(ctx, "d"); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Highest in a missing bucket returned %v, want ErrInvalidArgument", err)
	}
}

func TestOpen_badURL(t *testing.T) {
	for _, spec := range []string{"http://bucket", "s3://", "s3:///prefix", "::"} {
		if _, err := Open(context.Background(), spec); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Open(%q) returned %v, want ErrInvalidArgument", spec, err)
		}
	}
}
