package fencelocktest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Bucket creates a bucket of the test's own on the S3-compatible test
// server (S3Endpoint; skipped or failed as it is when there is none) and
// returns its URL for s3.Open, with prefix: s3://BUCKET/PREFIX?endpoint=URL.
// The bucket is left behind; the server is throwaway.
func S3Bucket(tb testing.TB, prefix string) string {
	tb.Helper()
	ep := S3Endpoint(tb)
	cfg, err := awsconfig.LoadDefaultConfig(tb.Context(), awsconfig.WithRegion("us-east-1"))
	if err != nil {
		tb.Fatalf("load AWS configuration: %v", err)
	}
	api := awss3.NewFromConfig(cfg, func(o *awss3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(ep), true })
	name := fmt.Sprintf("fencelock-test-%x", rand.Uint64())
	if _, err := api.CreateBucket(tb.Context(), &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Fatalf("create bucket %s at %s: %v", name, ep, err)
	}
	return "s3://" + name + "/" + prefix + "?endpoint=" + ep
}
