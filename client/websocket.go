package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// maxResponseBytes bounds one SessionResponse read from a WebSocket.
const maxResponseBytes = 4 << 20

// wsPath is where a node runs the Session over a WebSocket (api.WebSocketPath).
const wsPath = "/fencelock.v1.LockService/Session/websocket"

// carrier is what a stream's messages travel on: a WebSocket with the
// client's own transport (its messages written and read on the stream's
// goroutines, no HTTP/2 loop between), a Connect stream on HTTP/2 with an
// HTTP client of the caller's.
type carrier interface {
	Send(*fencelockv1.SessionRequest) error
	Receive() (*fencelockv1.SessionResponse, error)
	CloseRequest() error
	CloseResponse() error
}

// wsDialer opens WebSockets to one node, with the client's TLS
// configuration and token. The upgrade is an HTTP/1.1 request (ALPN
// http/1.1 over TLS), authenticated as every call.
type wsDialer struct {
	url    string // ws:// or wss://
	d      *websocket.Dialer
	header http.Header
}

func newWSDialer(base string, tlsConf *tls.Config, token string) *wsDialer {
	url := "ws" + strings.TrimPrefix(base, "http") + wsPath
	var tc *tls.Config
	if tlsConf != nil {
		tc = tlsConf.Clone()
		tc.NextProtos = []string{"http/1.1"}
	}
	d := &websocket.Dialer{HandshakeTimeout: 5 * time.Second, ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newFrameConn(c), nil
		}}
	if tc != nil {
		// The handshake is done here, so that the frameConn is above TLS.
		d.NetDialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialTLS(ctx, network, addr, tc)
		}
	}
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return &wsDialer{url: url, d: d, header: h}
}

// dialTLS opens a TLS connection to addr with conf, as gorilla/websocket
// would, as a frameConn.
func dialTLS(ctx context.Context, network, addr string, conf *tls.Config) (net.Conn, error) {
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if conf.ServerName == "" {
		conf = conf.Clone()
		conf.ServerName, _, _ = net.SplitHostPort(addr)
	}
	c := tls.Client(raw, conf)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return newFrameConn(c), nil
}

// wsCarrier is a stream on a WebSocket, dialed by whichever of Send and
// Receive runs first. A node, or a proxy, that answers the upgrade without
// upgrading fails it with errNoStreams: the client then makes unary calls.
// Once dialed, a call's own goroutine may Wait for a message and Receive
// it (see stream).
type wsCarrier struct {
	ctx    context.Context
	dial   *wsDialer
	once   sync.Once
	c      *websocket.Conn
	fc     *frameConn
	err    error
	dialed atomic.Bool // c and fc are set
}

func (w *wsCarrier) conn() (*websocket.Conn, error) {
	w.once.Do(func() {
		var resp *http.Response
		w.c, resp, w.err = w.dial.d.DialContext(w.ctx, w.dial.url, w.dial.header)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if errors.Is(w.err, websocket.ErrBadHandshake) && resp != nil && !passing(resp.StatusCode) {
			// The node, or a proxy before it, does not upgrade.
			w.err = fmt.Errorf("%s answered %s to a WebSocket upgrade: %w", w.dial.url, resp.Status, errNoStreams)
		}
		if w.c != nil {
			w.c.SetReadLimit(maxResponseBytes)
			w.fc = w.c.NetConn().(*frameConn)
			w.dialed.Store(true)
		}
	})
	return w.c, w.err
}

func (w *wsCarrier) Send(m *fencelockv1.SessionRequest) error {
	c, err := w.conn()
	if err != nil {
		return err
	}
	b, err := m.MarshalVT()
	if err != nil {
		return err
	}
	return c.WriteMessage(websocket.BinaryMessage, b)
}

func (w *wsCarrier) Receive() (*fencelockv1.SessionResponse, error) {
	c, err := w.conn()
	if err != nil {
		return nil, err
	}
	_, b, err := c.ReadMessage()
	if err != nil {
		return nil, err
	}
	m := &fencelockv1.SessionResponse{}
	return m, m.UnmarshalVT(b)
}

// Dialed reports whether the WebSocket is open.
func (w *wsCarrier) Dialed() bool { return w.dialed.Load() }

// Closed reports, without waiting, whether the node closed the open
// WebSocket and left nothing to read. Only a goroutine that could take
// the stream's read turn, and keeps others from it, may call it.
func (w *wsCarrier) Closed() bool { return w.dialed.Load() && w.fc.peerClosed() }

// Wait waits until a whole message has come, so that Receive will not
// wait, or until ctx ends. Only a goroutine that will Receive next may
// call it, and only once Dialed.
func (w *wsCarrier) Wait(ctx context.Context) error { return w.fc.wait(ctx) }

func (w *wsCarrier) CloseRequest() error { return w.CloseResponse() }

func (w *wsCarrier) CloseResponse() error {
	w.once.Do(func() { w.err = context.Canceled }) // never dialed: never will be
	if w.c != nil {
		return w.c.Close()
	}
	return nil
}

// passing reports whether an answer to an upgrade says only that the node
// cannot take it now (overloaded, restarting, a proxy without a node
// behind it): the call is retried, and the next stream tries the upgrade
// again. Any other answer means no WebSocket there.
func passing(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500 && status != http.StatusNotImplemented && status != http.StatusHTTPVersionNotSupported
}
