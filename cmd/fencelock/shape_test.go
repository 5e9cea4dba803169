package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
)

// TestCLI_ExitCodesAndJSONShapes checks the documented exit statuses and
// the one JSON shape of the lock commands (snake_case, tokens as numbers,
// durations as Go duration strings).
func TestCLI_ExitCodesAndJSONShapes(t *testing.T) {
	srv := testproc.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := []string{"FENCELOCK_SERVER=" + srv.Addr}

	// acquire --env, eval'd by a shell, feeds renew and release.
	sh := exec.CommandContext(ctx, "sh", "-c", `set -e
eval "$("$FL" acquire "it's mine" --ttl 30s --holder cron-7 --env)"
echo "token=$FENCELOCK_TOKEN lock=$FENCELOCK_LOCK"
"$FL" describe "$FENCELOCK_LOCK" --json
"$FL" renew "$FENCELOCK_LOCK" --json
"$FL" release "$FENCELOCK_LOCK" --json
"$FL" release "$FENCELOCK_LOCK" || echo "second release exit $?"`)
	sh.Env = append(env, "FL="+testproc.Binary(t), "PATH=/usr/bin:/bin")
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("shell script: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 6 || !strings.HasPrefix(lines[0], "token=") || !strings.HasSuffix(lines[0], "lock=it's mine") {
		t.Fatalf("acquire --env did not set the lock's variables:\n%s", out)
	}
	var lock struct {
		Name, Holder, TTL, ExpiresIn string
		Token                        json.Number
		Waiters                      []any
	}
	if err := json.Unmarshal([]byte(lines[1]), &struct {
		Name      *string      `json:"name"`
		Holder    *string      `json:"holder"`
		Token     *json.Number `json:"token"`
		TTL       *string      `json:"ttl"`
		ExpiresIn *string      `json:"expires_in"`
		Waiters   *[]any       `json:"waiters"`
	}{&lock.Name, &lock.Holder, &lock.Token, &lock.TTL, &lock.ExpiresIn, &lock.Waiters}); err != nil {
		t.Fatalf("describe --json: %v: %s", err, lines[1])
	}
	if lock.Holder != "cron-7" || lock.TTL != "30s" || lock.Token == "" || strings.Contains(lines[1], `"token":"`) ||
		!strings.HasSuffix(lock.ExpiresIn, "s") || lock.Waiters == nil {
		t.Errorf("describe --json = %s; want holder cron-7, ttl \"30s\", a numeric token, expires_in and waiters", lines[1])
	}
	if lines[2] != `{"name":"it's mine","ttl":"30s"}` || lines[3] != `{"name":"it's mine","released":true}` {
		t.Errorf("renew/release --json printed %q and %q", lines[2], lines[3])
	}
	if !strings.Contains(string(out), "second release exit 5") {
		t.Errorf("a release of a grant that ended: want exit 5 (lease lost):\n%s", out)
	}

	// Held: 3. Unreachable: 4. Usage: 2.
	if _, code := testproc.Run(ctx, t, env, "acquire", "held", "--ttl", "30s"); code != 0 {
		t.Fatalf("acquire held: exit %d", code)
	}
	if out, code := testproc.Run(ctx, t, env, "acquire", "held", "--wait", "0"); code != exitLockHeld {
		t.Errorf("acquire of a held lock: exit %d, want %d:\n%s", code, exitLockHeld, out)
	}
	if out, code := testproc.Run(ctx, t, env, "lock", "held", "--wait", "0", "--", "true"); code != exitLockHeld {
		t.Errorf("lock of a held lock: exit %d, want %d:\n%s", code, exitLockHeld, out)
	}
	dead := testproc.FreeAddr(t)
	if out, code := testproc.Run(ctx, t, nil, "describe", "x", "--server", dead, "--retry-timeout", "200ms"); code != exitUnavailable {
		t.Errorf("describe with no service: exit %d, want %d:\n%s", code, exitUnavailable, out)
	}
	if out, code := testproc.Run(ctx, t, env, "acquire", "x", "--ttl", "-1s"); code != exitUsage {
		t.Errorf("acquire --ttl -1s: exit %d, want %d:\n%s", code, exitUsage, out)
	}
	if out, code := testproc.Run(ctx, t, env, "describe", "nope"); code != exitFailed || strings.Count(out, `describe "nope"`) != 1 {
		t.Errorf("describe of a missing lock: exit %d, want %d, naming it once:\n%s", code, exitFailed, out)
	}
	if out, code := testproc.Run(ctx, t, env, "list", "hel", "--json"); code != 0 || !strings.HasPrefix(out, `{"name":"held",`) {
		t.Errorf("list PREFIX --json: exit %d, want the held lock as JSON:\n%s", code, out)
	}
	if out, code := testproc.Run(ctx, t, env, "lock", "free", "--", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("lock -- exit 7: exit %d, want the command's 7:\n%s", code, out)
	}
}

func TestVerify_JSONPrintsOneResultPerScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testproc.Binary(t), "verify", "--scenario", "1", "--duration", "2s", "--json", "--out", t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // too short to inject a fault: the scenario fails, the JSON is what is checked
	var r struct {
		Scenario string `json:"scenario"`
		Duration string `json:"duration"`
		Checks   []any  `json:"checks"`
	}
	err := json.Unmarshal(out, &r)
	ran, derr := time.ParseDuration(r.Duration) // how long it ran: 2 s and the time to stop
	if err != nil || derr != nil || r.Scenario != "kill" || ran < 2*time.Second || ran > 10*time.Second || len(r.Checks) == 0 {
		t.Fatalf("verify --json printed %q (%v); want one JSON result with a duration of about 2s; stderr:\n%s", out, err, stderr.String())
	}
}
