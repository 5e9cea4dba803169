package testproc

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// ServeH2C serves h on loopback with HTTP/1.1 and HTTP/2 without TLS (h2c),
// as a node does, until the test ends, and returns its address. The test's
// other cleanups run first, so close what keeps calls waiting on h there.
func ServeH2C(tb testing.TB, h http.Handler) string {
	tb.Helper()
	hs := StartH2C(Listen(tb), h)
	tb.Cleanup(hs.Close)
	return hs.Listener.Addr().String()
}

// Listen returns a listener on a free loopback port, closed when the test
// ends if nothing serves on it.
func Listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// StartH2C serves h on ln with HTTP/1.1 and h2c; the caller closes it.
func StartH2C(ln net.Listener, h http.Handler) *httptest.Server {
	hs := httptest.NewUnstartedServer(h)
	hs.Listener.Close()
	hs.Listener = ln
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	hs.Config.Protocols = p
	hs.Start()
	return hs
}

// H2CTransport returns an HTTP transport that speaks HTTP/2 without TLS to
// http:// URLs, as the Go client's default transport does.
func H2CTransport() *http.Transport {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: p}
}
