package testproc

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// ServeH2C serves h on loopback with HTTP/1.1 and HTTP/2 without TLS (h2c),
// as a node does, until the test ends, and returns its address. The test's
// other cleanups run first, so close what keeps calls waiting on h there.
func ServeH2C(tb testing.TB, h http.Handler) string {
	tb.Helper()
	hs := httptest.NewUnstartedServer(h)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	hs.Config.Protocols = p
	hs.Start()
	tb.Cleanup(hs.Close)
	return hs.Listener.Addr().String()
}

// H2CTransport returns an HTTP transport that speaks HTTP/2 without TLS to
// http:// URLs, as the Go client's default transport does.
func H2CTransport() *http.Transport {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: p}
}
