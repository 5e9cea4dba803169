package s3

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencelock/fencelock"
)

// Open returns the Bucket a URL names:
//
//	s3://BUCKET[/PREFIX][?endpoint=URL][&region=REGION]
//
// Credentials, and the region when the URL has none, come from the AWS
// SDK's default chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
// ~/.aws, an instance role); without any region it is us-east-1. With
// endpoint, an S3-compatible server, requests use path-style addressing.
func Open(ctx context.Context, spec string) (*Bucket, error) {
	u, err := url.Parse(spec)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return nil, fmt.Errorf("open s3 bucket %q: want s3://BUCKET[/PREFIX][?endpoint=URL&region=REGION]: %w", spec, fencelock.ErrInvalidArgument)
	}
	q := u.Query()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("open s3 bucket %q: load AWS configuration: %w", spec, err)
	}
	if r := q.Get("region"); r != "" {
		cfg.Region = r
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	api := awss3.NewFromConfig(cfg, func(o *awss3.Options) {
		if ep := q.Get("endpoint"); ep != "" {
			o.BaseEndpoint = aws.String(ep)
			o.UsePathStyle = true
		}
	})
	prefix := strings.TrimPrefix(u.Path, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return New(api, u.Host, prefix), nil
}
