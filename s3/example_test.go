package s3_test

import (
	"context"
	"errors"
	"log"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/s3"
)

// Write report.pdf to a bucket while holding the lock "reports". Not run:
// it needs a lock service and a bucket.
func Example() {
	ctx := context.Background()
	c, err := client.New("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	lock, err := c.Acquire(ctx, "reports")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.WithoutCancel(ctx))

	bucket, err := s3.Open(ctx, "s3://my-bucket/fenced") // ?endpoint=http://… for a compatible server
	if err != nil {
		log.Fatal(err)
	}
	_, err = bucket.Put(lock.Context(), lock.Name(), lock.Token(), "report.pdf", []byte("%PDF-1.7 …"))
	var stale *fencelock.StaleTokenError
	if errors.As(err, &stale) {
		log.Printf("fenced off: a newer holder wrote with token %d", stale.Highest)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	pdf, _, err := bucket.Get(ctx, "report.pdf")
	log.Println(len(pdf), err)
}
