package testproc

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Metric returns the value of series (its name and labels exactly as
// exported) on the node whose API is at addr, or -1 if the node exports
// no such series.
func Metric(tb testing.TB, addr, series string) float64 {
	tb.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		tb.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				tb.Fatalf("scrape %s: %q: %v", addr, sc.Text(), err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("scrape %s: %v", addr, err)
	}
	return -1
}
