package testproc

import (
	"testing"

	"github.com/fencelock/fencelock/internal/netproxy"
)

// Proxy forwards TCP connections from Addr to a target and can drop traffic
// silently (see netproxy.Proxy).
type Proxy = netproxy.Proxy

// StartProxy listens on a free loopback port and forwards to target until
// the test ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := netproxy.Listen(target)
	if err != nil {
		tb.Fatalf("proxy listen: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}
