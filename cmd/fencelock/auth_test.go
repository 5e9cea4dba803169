package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
)

// TestAuth_TokensAndPolicy: a node with a tokens and a policy file grants
// a caller what its policy says, on the Go client's stream and on the JSON
// API, and refuses callers without a credential or the permission.
func TestAuth_TokensAndPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code := testproc.Run(ctx, t, nil, "token", "new", "billing")
	m := regexp.MustCompile(`token: (\w+)\ntokens-file line: (billing \w+)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("token new exited %d: %s", code, out)
	}
	dir := t.TempDir()
	tokens, policy := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy")
	if err := os.WriteFile(tokens, []byte(m[2]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte("billing lock,read billing/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := testproc.StartServer(t, "--tokens-file", tokens, "--policy-file", policy)
	auth := []string{"FENCELOCK_AUTH_TOKEN=" + m[1], "FENCELOCK_SERVER=" + s.Addr}
	if out, code := testproc.Run(ctx, t, auth, "acquire", "billing/42"); code != 0 {
		t.Fatalf("acquire billing/42 with billing's token exited %d: %s", code, out)
	}
	if out, code := testproc.Run(ctx, t, auth, "acquire", "hr/7", "--retry-timeout", "1s"); code == 0 || !strings.Contains(out, "may not lock") {
		t.Fatalf("acquire hr/7 with billing's token exited %d: %s; want permission denied", code, out)
	}
	anon := []string{"FENCELOCK_SERVER=" + s.Addr}
	if out, code := testproc.Run(ctx, t, anon, "acquire", "billing/43", "--retry-timeout", "1s"); code == 0 || !strings.Contains(out, "credential") {
		t.Fatalf("acquire without a token exited %d: %s; want unauthenticated", code, out)
	}
	post := func(token string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr+"/fencelock.v1.LockService/Acquire",
			strings.NewReader(`{"name":"billing/44","ttl":"10s"}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(""); got != http.StatusUnauthorized {
		t.Errorf("JSON Acquire without a token answered %d, want 401", got)
	}
	if got := post("not-a-token"); got != http.StatusUnauthorized {
		t.Errorf("JSON Acquire with an unknown token answered %d, want 401", got)
	}
	if got := post(m[1]); got != http.StatusOK {
		t.Errorf("JSON Acquire with billing's token answered %d, want 200", got)
	}
}
