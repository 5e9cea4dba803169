package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// WebSocketPath is where the Session stream runs over a WebSocket (RFC
// 6455): each binary message one SessionRequest or SessionResponse, as on
// the Connect stream.
const WebSocketPath = "/fencelock.v1.LockService/Session/websocket"

// wsPing is how the node finds a WebSocket client that vanished: it pings
// every after, and ends a socket that sent nothing, pongs included, for
// after + timeout.
type wsPing struct{ after, timeout time.Duration }

var defaultWSPing = wsPing{after: 10 * time.Second, timeout: 5 * time.Second}

// sessionWebSocket runs the Session over a WebSocket upgraded from a
// request that passed the same middleware as every call. Browsers' cross-
// site requests are refused (the Origin must be the node's own).
func sessionWebSocket(n node, wk *workers, p wsPing) http.Handler {
	up := websocket.Upgrader{ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return // Upgrade answered
		}
		defer c.Close()
		c.SetReadLimit(maxMessageBytes)
		ws := &wsStream{c: c, p: p}
		ws.alive()
		c.SetPongHandler(func(string) error { ws.alive(); return nil })
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go ws.ping(ctx)
		_ = serveSession(ctx, n, wk, ws)
	})
}

// wsStream is a Session stream on a WebSocket.
type wsStream struct {
	c           *websocket.Conn
	p           wsPing
	deadlineSet time.Time // when Send last moved the write deadline (Sends are serial)
}

// alive moves the read deadline on: the client was heard from.
func (ws *wsStream) alive() { _ = ws.c.SetReadDeadline(time.Now().Add(ws.p.after + ws.p.timeout)) }

// ping pings the client every p.after until ctx ends.
func (ws *wsStream) ping(ctx context.Context) {
	t := time.NewTicker(ws.p.after)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = ws.c.WriteControl(websocket.PingMessage, nil, time.Now().Add(ws.p.timeout))
		}
	}
}

// Receive reads the next message. A close frame ends the stream as a
// broken one (its calls end, their requests keep their place for a
// retry): after it nothing more can be sent, so no call is left to be
// answered into a closed socket.
func (ws *wsStream) Receive() (*fencelockv1.SessionRequest, error) {
	typ, b, err := ws.c.ReadMessage()
	switch {
	case err != nil:
		return nil, err
	case typ != websocket.BinaryMessage:
		return nil, errTextMessage
	}
	ws.alive()
	m := &fencelockv1.SessionRequest{}
	if err := m.UnmarshalVT(b); err != nil {
		return nil, err
	}
	return m, nil
}

// Send writes m, failing if the client has not taken it within the time
// a silent client is given (it stopped reading: the session ends).
func (ws *wsStream) Send(m *fencelockv1.SessionResponse) error {
	b, err := m.MarshalVT()
	if err != nil {
		return err
	}
	window := ws.p.after + ws.p.timeout
	if now := time.Now(); now.Sub(ws.deadlineSet) > window/16 {
		// Moved on at most 16 times a window: the deadline stays within
		// a sixteenth of it, and a busy stream does not reset a timer per
		// message.
		ws.deadlineSet = now
		_ = ws.c.SetWriteDeadline(now.Add(window))
	}
	return ws.c.WriteMessage(websocket.BinaryMessage, b)
}
