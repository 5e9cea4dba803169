package verify_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/verify"
)

type answer struct {
	ID    int      `json:"id"`
	Type  string   `json:"type"`
	Value []string `json:"value"`
	ETag  string   `json:"etag"`
	Code  string   `json:"code"`
}

// startWorker runs a worker whose OpenFunc returns a fence.MemoryResource
// and records the spec it got. It returns a function that sends one line and
// reads the answer. The worker ends with the test.
func startWorker(t *testing.T, setup string) (send func(line string) answer, gotSpec *string) {
	gotSpec = new(string)
	open := func(_ context.Context, spec string) (fence.Resource, error) {
		*gotSpec = spec
		return &fence.MemoryResource{}, nil
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// The lock service is never called: these requests touch only the resource.
		done <- verify.RunWorker(t.Context(), verify.WorkerConfig{Open: open}, inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("RunWorker returned %v after its input ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("RunWorker did not return after its input ended")
		}
	})
	lines := bufio.NewScanner(outR)
	send = func(line string) answer {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatalf("send %s: %v", line, err)
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %s: %v", line, lines.Err())
		}
		var a answer
		if err := json.Unmarshal(lines.Bytes(), &a); err != nil {
			t.Fatalf("answer %q: %v", lines.Text(), err)
		}
		return a
	}
	if a := send(setup); a.Type != "ok" {
		t.Fatalf("setup answered %+v, want ok", a)
	}
	return send, gotSpec
}

// TestRunWorker_customResource drives a worker whose OpenFunc is the
// caller's: the setup line's resource spec reaches it, and its refusals
// come back as fail with the stale-token code.
func TestRunWorker_customResource(t *testing.T) {
	t.Parallel()
	send, gotSpec := startWorker(t, `{"endpoints":["127.0.0.1:1"],"resource":"mem://orders","fencing":true,"op_timeout":1000000000}`)
	if *gotSpec != "mem://orders" {
		t.Errorf("OpenFunc got spec %q, want mem://orders", *gotSpec)
	}
	tests := []struct {
		req        string
		want       string
		wantCode   string
		wantValue  []string
		wantETag   string
		definition string
	}{
		{req: `{"id":1,"f":"read","lock":"d"}`, want: "ok", definition: "a read of nothing"},
		{req: `{"id":2,"f":"fence","lock":"d","token":5}`, want: "ok", definition: "a fence raise"},
		{req: `{"id":3,"f":"write","lock":"d","token":5,"body":["a"]}`, want: "ok", wantETag: "1", definition: "a write with the current token"},
		{req: `{"id":4,"f":"write","lock":"d","token":4,"body":["b"]}`, want: "fail", wantCode: "stale_fencing_token", definition: "a stale write"},
		{req: `{"id":5,"f":"read","lock":"d"}`, want: "ok", wantValue: []string{"a"}, wantETag: "1", definition: "a read"},
		{req: `{"id":6,"f":"final","lock":"d"}`, want: "ok", wantValue: []string{"a"}, wantETag: "1", definition: "the final read"},
	}
	for i, tt := range tests {
		a := send(tt.req)
		if a.ID != i+1 || a.Type != tt.want || a.Code != tt.wantCode || !slices.Equal(a.Value, tt.wantValue) || a.ETag != tt.wantETag {
			t.Errorf("%s (%s) answered %+v; want %s, code %q, value %q, etag %q", tt.definition, tt.req, a, tt.want, tt.wantCode, tt.wantValue, tt.wantETag)
		}
	}
}

// TestRunWorker_unfenced: with fencing off (the negative control) every
// write is accepted, a stale one too.
func TestRunWorker_unfenced(t *testing.T) {
	t.Parallel()
	send, _ := startWorker(t, `{"endpoints":["127.0.0.1:1"],"resource":"mem://x","fencing":false,"op_timeout":1000000000}`)
	for i, req := range []string{
		`{"id":1,"f":"write","lock":"d","token":5,"body":["a"]}`,
		`{"id":2,"f":"fence","lock":"d","token":3}`,
		`{"id":3,"f":"write","lock":"d","token":4,"body":["b"]}`,
	} {
		if a := send(req); a.ID != i+1 || a.Type != "ok" {
			t.Errorf("%s answered %+v, want ok: without fencing every write lands", req, a)
		}
	}
	if a := send(`{"id":4,"f":"read","lock":"d"}`); !slices.Equal(a.Value, []string{"b"}) {
		t.Errorf("read answered %+v, want the stale write's value [b]", a)
	}
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	base := verify.DefaultConfig()
	base.Binary, base.OutDir = "/bin/fencelock", "/tmp/out"
	tests := []struct {
		name    string
		change  func(*verify.Config)
		wantErr string
	}{
		{name: "the default object store", change: func(*verify.Config) {}},
		{name: "postgres", change: func(c *verify.Config) { c.Resource = "postgres://u@h/db" }},
		{name: "redis", change: func(c *verify.Config) { c.Resource = "redis://h:6379" }},
		{name: "mysql", change: func(c *verify.Config) { c.Resource = "mysql://u@tcp(h:3306)/db" }},
		{name: "a custom resource with its worker", change: func(c *verify.Config) {
			c.Resource, c.Worker = "mine://x", []string{"/bin/mine", "worker"}
		}},
		{name: "a custom resource without a worker", change: func(c *verify.Config) { c.Resource = "mine://x" }, wantErr: "your own worker command"},
		{name: "a store URL and another resource", change: func(c *verify.Config) {
			c.StoreURL, c.Resource = "http://h:7080", "redis://h:6379"
		}, wantErr: "choose one"},
		{name: "a nemesis hook without servers", change: func(c *verify.Config) { c.NemesisExec = "/bin/true" }, wantErr: "existing deployment"},
		{name: "a password is not printed", change: func(c *verify.Config) { c.Resource = "mine://user:secret@h/x" }, wantErr: "xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.change(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "secret")):
				t.Errorf("Validate() = %v, want an error mentioning %q (and no password)", err, tt.wantErr)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ spec, want string }{
		{"postgres://u:secret@h/db", "postgres://u:xxxxx@h/db"},
		{"mysql://u:secret@tcp(h:3306)/db", "mysql://u:xxxxx@tcp(h:3306)/db"},
		{"mysql://u@tcp(h:3306)/db", "mysql://u@tcp(h:3306)/db"},
		{"mysql://u:secret@tcp(h:3306", "mysql://(a DSN that does not parse)"},
		{"redis://h:6379", "redis://h:6379"},
	}
	for _, tt := range tests {
		if got := verify.Redact(tt.spec); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.spec, got, tt.want)
		}
	}
}
