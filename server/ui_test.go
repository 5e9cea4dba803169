package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
)

// TestUI_ShowsALockAndUpdatesWhenItIsReleased drives the dashboard in a
// real headless Chromium (Debian's chromium and chromium-driver): the page
// shows a lock the test holds with its token, and drops it once released.
func TestUI_ShowsALockAndUpdatesWhenItIsReleased(t *testing.T) {
	wd := startChromeDriver(t)
	srv := testproc.StartServer(t)
	c := newClient(t, srv.Addr)
	ctx := context.Background()
	lock, err := c.Acquire(ctx, "ui/report.pdf", client.WithTTL(30*time.Second), client.WithHolder("ui-test"))
	if err != nil {
		t.Fatal(err)
	}
	wd.call(t, "POST", "/url", map[string]any{"url": "http://" + srv.Addr + "/ui/"}, nil)
	row := `var r = document.querySelector('tr[data-lock="ui/report.pdf"]'); return r ? r.innerText : "";`
	text := wd.waitFor(t, row, func(s string) bool { return s != "" })
	if !strings.Contains(text, "ui-test") || !strings.Contains(text, lock.Token().String()) {
		t.Fatalf("the lock's row reads %q, want its holder ui-test and token %d", text, lock.Token())
	}
	wd.waitFor(t, `return document.getElementById("state").innerText;`, func(s string) bool { return s == "leader" })
	checkScreenshot(t, wd.screenshot(t))

	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wd.waitFor(t, row, func(s string) bool { return s == "" })
	events := wd.waitFor(t, `return document.getElementById("events").innerText;`,
		func(s string) bool { return strings.Contains(s, "release") })
	if !strings.Contains(events, "grant") || !strings.Contains(events, lock.Token().String()) {
		t.Errorf("recent events read %q, want the grant and release of token %d", events, lock.Token())
	}
}

// checkScreenshot fails unless b is a PNG of the window's size with more
// than a blank page in it.
func checkScreenshot(t *testing.T, b []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	r := img.Bounds()
	if r.Dx() < 800 || r.Dy() < 600 {
		t.Fatalf("screenshot is %dx%d, want the 1280x900 window", r.Dx(), r.Dy())
	}
	colors := map[uint32]bool{}
	for y := r.Min.Y; y < r.Max.Y; y += 7 {
		for x := r.Min.X; x < r.Max.X; x += 7 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			colors[cr>>12<<8|cg>>12<<4|cb>>12] = true
		}
	}
	if len(colors) < 4 {
		t.Fatalf("screenshot has %d colours: the page did not render", len(colors))
	}
	if dir := os.Getenv("FENCELOCK_UI_SCREENSHOT_DIR"); dir != "" {
		_ = os.WriteFile(dir+"/dashboard.png", b, 0o644)
	}
}

// webDriver is one WebDriver session of a chromedriver process.
type webDriver struct {
	base    string // http://127.0.0.1:PORT/session/ID
	timeout time.Duration
}

// startChromeDriver starts chromedriver with a headless Chromium session.
// Without chromedriver the test skips, or fails when CI is set.
func startChromeDriver(t *testing.T) *webDriver {
	t.Helper()
	path, err := exec.LookPath("chromedriver")
	if err != nil {
		msg := "chromedriver not found: install Debian's chromium and chromium-driver (scripts/test.sh does)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	addr := testproc.FreeAddr(t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	cmd := exec.Command(path, "--port="+port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	root := &webDriver{base: "http://" + addr, timeout: 15 * time.Second}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(root.base + "/status"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("chromedriver did not start within 15 s")
		}
	}
	opts := map[string]any{"args": []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--window-size=1280,900"}}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		opts["binary"] = "/usr/bin/chromium"
	}
	var sess struct{ SessionID string }
	root.call(t, "POST", "/session", map[string]any{"capabilities": map[string]any{
		"alwaysMatch": map[string]any{"browserName": "chrome", "goog:chromeOptions": opts}}}, &sess)
	wd := &webDriver{base: root.base + "/session/" + sess.SessionID, timeout: root.timeout}
	t.Cleanup(func() { wd.call(t, "DELETE", "", nil, nil) })
	return wd
}

// call sends one WebDriver command; path is under the session (or the
// driver, for "/session"). out receives the answer's "value".
func (wd *webDriver) call(t *testing.T, method, path string, body, out any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, wd.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var ans struct{ Value json.RawMessage }
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("webdriver %s %s: status %d, %v: %s", method, path, resp.StatusCode, err, ans.Value)
	}
	if out != nil {
		if err := json.Unmarshal(ans.Value, out); err != nil {
			t.Fatalf("webdriver %s %s: %v in %s", method, path, err, ans.Value)
		}
	}
}

// waitFor runs script in the page until ok holds for its string result.
func (wd *webDriver) waitFor(t *testing.T, script string, ok func(string) bool) string {
	t.Helper()
	var s string
	for deadline := time.Now().Add(wd.timeout); ; time.Sleep(100 * time.Millisecond) {
		wd.call(t, "POST", "/execute/sync", map[string]any{"script": script, "args": []any{}}, &s)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never got there: %q returned %q", script, s)
		}
	}
}

func (wd *webDriver) screenshot(t *testing.T) []byte {
	t.Helper()
	var b64 string
	wd.call(t, "GET", "/screenshot", nil, &b64)
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	return b
}
