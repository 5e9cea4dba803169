package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/testproc"
)

// TestDeploy_DashboardAndAlertsNameOnlyMetricsThatExist fails when the
// Grafana dashboard or the alert rules under deploy/ name a fencelock_
// metric that a node does not export.
func TestDeploy_DashboardAndAlertsNameOnlyMetricsThatExist(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	// A refusal, so that the refusal counter has a series to export.
	for i := 0; i < 2; i++ {
		r, err := http.Post("http://"+srv.Addr+"/fencelock.v1.LockService/Acquire", "application/json",
			strings.NewReader(`{"name":"deploy-test","ttl":"10s"}`))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
	}
	resp, err := http.Get("http://" + srv.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	exported := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			exported[f[2]] = true
		}
	}
	name := regexp.MustCompile(`fencelock_[a-z_]+`)
	for _, file := range []string{"../../deploy/grafana-dashboard.json", "../../deploy/prometheus-alerts.yml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(file, ".json") && !json.Valid(b) {
			t.Errorf("%s is not valid JSON", file)
		}
		named := name.FindAllString(string(b), -1)
		if len(named) < 5 {
			t.Errorf("%s names %d metrics; the test reads it wrong", file, len(named))
		}
		for _, m := range named {
			base := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b := strings.TrimSuffix(m, suffix); b != m && exported[b] {
					base = b
				}
			}
			if !exported[base] {
				t.Errorf("%s names %s, which a node does not export", file, m)
			}
		}
	}
}
