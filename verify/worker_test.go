package verify_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/verify"
)

// memoryResource is a Resource in one process's memory, fenced by
// fence.Memory: enough to drive one worker in a test.
type memoryResource struct {
	f       *fence.Memory
	mu      sync.Mutex
	lists   map[string][]string
	version int64
}

func (m *memoryResource) Fence(ctx context.Context, domain string, token fencelock.Token) error {
	return m.f.Check(ctx, domain, token)
}

func (m *memoryResource) Read(_ context.Context, domain string) ([]string, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.lists[domain]), m.version, nil
}

func (m *memoryResource) Write(ctx context.Context, domain string, token fencelock.Token, list []string) (int64, error) {
	var v int64
	err := m.f.Do(ctx, domain, token, func(context.Context) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.version++
		m.lists[domain], v = slices.Clone(list), m.version
		return nil
	})
	return v, err
}

func (m *memoryResource) Close() error { return nil }

// TestRunWorker_customResource drives a worker whose OpenFunc is the
// caller's: the setup line's resource spec and fencing flag reach it, and
// its refusals come back as fail with the stale-token code.
func TestRunWorker_customResource(t *testing.T) {
	var gotSpec string
	var gotFencing bool
	open := func(_ context.Context, spec string, fencing bool) (verify.Resource, error) {
		gotSpec, gotFencing = spec, fencing
		return &memoryResource{f: fence.NewMemory(), lists: map[string][]string{}}, nil
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// The lock service is never called: these requests touch only the resource.
		done <- verify.RunWorker(t.Context(), verify.WorkerConfig{Open: open}, inR, outW)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	type answer struct {
		ID    int      `json:"id"`
		Type  string   `json:"type"`
		Value []string `json:"value"`
		ETag  string   `json:"etag"`
		Code  string   `json:"code"`
	}
	send := func(line string) answer {
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
	if a := send(`{"endpoints":["127.0.0.1:1"],"resource":"mem://orders","fencing":true,"op_timeout":1000000000}`); a.Type != "ok" {
		t.Fatalf("setup answered %+v, want ok", a)
	}
	if gotSpec != "mem://orders" || !gotFencing {
		t.Errorf("OpenFunc got spec %q, fencing %v; want mem://orders, true", gotSpec, gotFencing)
	}
	tests := []struct {
		req        string
		want       string
		wantCode   string
		wantValue  []string
		wantETag   string
		definition string
	}{
		{req: `{"id":1,"f":"fence","lock":"d","token":5}`, want: "ok", definition: "a fence raise"},
		{req: `{"id":2,"f":"write","lock":"d","token":5,"body":["a"]}`, want: "ok", wantETag: "1", definition: "a write with the current token"},
		{req: `{"id":3,"f":"write","lock":"d","token":4,"body":["b"]}`, want: "fail", wantCode: "stale_fencing_token", definition: "a stale write"},
		{req: `{"id":4,"f":"read","lock":"d"}`, want: "ok", wantValue: []string{"a"}, wantETag: "1", definition: "a read"},
		{req: `{"id":5,"f":"final","lock":"d"}`, want: "ok", wantValue: []string{"a"}, wantETag: "1", definition: "the final read"},
	}
	for i, tt := range tests {
		a := send(tt.req)
		if a.ID != i+1 || a.Type != tt.want || a.Code != tt.wantCode || !slices.Equal(a.Value, tt.wantValue) || a.ETag != tt.wantETag {
			t.Errorf("%s (%s) answered %+v; want %s, code %q, value %q, etag %q", tt.definition, tt.req, a, tt.want, tt.wantCode, tt.wantValue, tt.wantETag)
		}
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunWorker returned %v after its input ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunWorker did not return after its input ended")
	}
}

func TestConfig_Validate(t *testing.T) {
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
