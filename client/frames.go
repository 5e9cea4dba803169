package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"time"

	"github.com/fencelock/fencelock/internal/rawio"
)

// Bounds of a frameConn's buffer: it starts small (a client may hold
// thousands of streams) and grows to hold one whole message of up to
// maxFrameBuf bytes; gorilla reads a longer one partly from the socket.
const (
	minFrameBuf = 4 << 10
	maxFrameBuf = 64 << 10
)

// frameConn is a WebSocket's connection on the client, beneath
// gorilla/websocket. It reads the node's bytes into a buffer of its own
// and hands gorilla at most the rest of one frame per Read, so gorilla's
// buffer never holds a frame that gorilla has not begun. Between two
// messages, then, all that has come is here: ready knows whether gorilla
// can read a whole message without waiting, and wait waits for one until
// a context ends, without breaking the connection (a read deadline under
// gorilla would break it for good).
//
// Reads are serial (a stream's read turn); Write, Close and the rest are
// the connection's own.
type frameConn struct {
	net.Conn        // TLS or TCP
	buf      []byte // read and not handed on: buf[r:w]
	r, w     int
	err      error // the connection's read error, handed on once buf is empty
	upgraded bool  // the upgrade's answer was found, and was 101: frames follow
	plain    bool  // the answer was not an upgrade: bytes are handed on as they come
	left     int64 // bytes of the frame (or the upgrade's answer) being handed on
}

// errFrameTooLong: a frame longer than a message may be (gorilla refuses
// the message anyway).
var errFrameTooLong = errors.New("websocket: a frame longer than maxResponseBytes")

func newFrameConn(c net.Conn) *frameConn {
	return &frameConn{Conn: c, buf: make([]byte, minFrameBuf)}
}

// Read hands on what has come, up to the end of the current frame,
// waiting for it if nothing has.
func (c *frameConn) Read(p []byte) (int, error) {
	n := c.handable()
	for n == 0 && c.err == nil {
		_ = c.fill(context.Background())
		n = c.handable()
	}
	if n == 0 {
		return 0, c.err
	}
	n = copy(p, c.buf[c.r:c.r+n])
	c.r += n
	c.left -= int64(n)
	return n, nil
}

// handable returns how many buffered bytes Read may hand on now: the rest
// of the current frame, once its header has come whole. Before the
// upgrade it is the HTTP answer, once its header has come whole.
func (c *frameConn) handable() int {
	switch {
	case c.plain:
		return c.w - c.r
	case c.left > 0:
	case !c.upgraded:
		return c.answer()
	default:
		hl, pl, _, _, ok := frameHeader(c.buf[c.r:c.w])
		switch {
		case !ok:
			return 0
		case pl > maxResponseBytes:
			c.err = errFrameTooLong
			return 0
		}
		c.left = int64(hl) + pl
	}
	return int(min(c.left, int64(c.w-c.r)))
}

// answer is handable before the upgrade: the HTTP answer's header once
// it has come whole, frames after it if it is 101 Switching Protocols.
// Any other answer, or a header that does not fit the buffer, is handed
// on as it comes.
func (c *frameConn) answer() int {
	i := bytes.Index(c.buf[c.r:c.w], []byte("\r\n\r\n"))
	switch {
	case i >= 0 && bytes.HasPrefix(c.buf[c.r:c.w], []byte("HTTP/1.1 101 ")):
		c.left, c.upgraded = int64(i+4), true
		return i + 4
	case i >= 0 || c.w-c.r >= maxFrameBuf:
		c.plain = true
		return c.w - c.r
	}
	return 0
}

// ready reports whether gorilla would read a whole message (or a close,
// or the connection's error) without waiting: all of it has come. A
// buffer full to its limit counts too: the node is sending a long message.
func (c *frameConn) ready() bool {
	switch {
	case c.err != nil || c.w-c.r >= maxFrameBuf:
		return true
	case !c.upgraded || c.left > int64(c.w-c.r):
		return false
	}
	for at := c.r + int(c.left); ; {
		hl, pl, fin, op, ok := frameHeader(c.buf[at:c.w])
		if !ok || int64(c.w-at-hl) < pl {
			return false
		}
		if fin && (op < 8 || op == closeOp) {
			return true
		}
		at += hl + int(pl)
	}
}

// closeOp is the opcode of a close frame; 8 and above are control frames.
const closeOp = 8

// frameHeader parses the WebSocket frame header at the start of b (RFC
// 6455, section 5.2): its length, the payload's, the FIN bit and the
// opcode; ok is false until all of the header has come.
func frameHeader(b []byte) (hl int, pl int64, fin bool, op byte, ok bool) {
	if len(b) < 2 {
		return 0, 0, false, 0, false
	}
	hl, pl = 2, int64(b[1]&0x7f)
	switch pl {
	case 126:
		hl = 4
		if len(b) >= hl {
			pl = int64(binary.BigEndian.Uint16(b[2:4]))
		}
	case 127:
		hl = 10
		if len(b) >= hl {
			pl = int64(binary.BigEndian.Uint64(b[2:10]) & (1<<63 - 1))
		}
	}
	if b[1]&0x80 != 0 {
		hl += 4 // masking key
	}
	if len(b) < hl {
		return 0, 0, false, 0, false
	}
	return hl, pl, b[0]&0x80 != 0, b[0] & 0x0f, true
}

// peerClosed reports, without waiting, whether the node has closed the
// connection and nothing it sent before is left to read.
func (c *frameConn) peerClosed() bool {
	switch {
	case c.err != nil:
		return true
	case c.r < c.w:
		return false
	}
	raw := c.Conn
	if tc, ok := raw.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	return rawio.PeerClosed(raw)
}

// wait waits until ready, or until ctx ends (it returns ctx's error and
// leaves the connection as it was).
func (c *frameConn) wait(ctx context.Context) error {
	for !c.ready() {
		if err := c.fill(ctx); err != nil {
			return err
		}
	}
	return nil
}

// fill reads what the connection has into the buffer, waiting until it
// has something or ctx ends; it returns ctx's error only. A read error is
// kept in err.
func (c *frameConn) fill(ctx context.Context) error {
	if c.r == c.w {
		c.r, c.w = 0, 0
	} else if c.w == len(c.buf) {
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
	}
	if c.w == len(c.buf) {
		if len(c.buf) >= maxFrameBuf {
			return nil // ready
		}
		c.buf = append(c.buf, make([]byte, len(c.buf))...)[:min(2*len(c.buf), maxFrameBuf)]
	}
	var stop func() bool
	var stopped chan struct{}
	if ctx.Done() != nil {
		stopped = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
			close(stopped)
		})
	}
	n, err := c.Conn.Read(c.buf[c.w:])
	c.w += n
	if stop != nil && !stop() {
		<-stopped
		_ = c.Conn.SetReadDeadline(time.Time{})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = nil // only ctx's end set a deadline: TLS and TCP go on after it
		}
		if err == nil {
			return ctx.Err()
		}
	}
	if err != nil && c.err == nil {
		c.err = err
	}
	return nil
}
