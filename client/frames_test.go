package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/protobuf/proto"

	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// answers is a SessionResponse of n results, as marshalled.
func answers(t *testing.T, n int) []byte {
	m := &fencelockv1.SessionResponse{}
	for i := range n {
		m.Results = append(m.Results, &fencelockv1.Result{Id: uint64(i + 1), Result: &fencelockv1.Result_Release{Release: &fencelockv1.ReleaseResponse{}}})
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWSCarrier_WaitEndsWithItsContext, over TCP and over TLS: a Wait
// for a message ends when its context does, and the WebSocket goes on as
// if nothing happened. A message of many frames, a ping and a second
// message sent right after it all come whole. The Wait for the second
// message would wait in vain if gorilla had read it along with the first.
func TestWSCarrier_WaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[secure], func(t *testing.T) {
			t.Parallel()
			long, short := answers(t, 2000), answers(t, 1)
			send, sent := make(chan struct{}), make(chan struct{})
			up := websocket.Upgrader{WriteBufferSize: 1024} // the long message goes as many frames
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := up.Upgrade(w, r, nil)
				if err != nil {
					return
				}
				defer c.Close()
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
				<-send
				_ = c.WriteMessage(websocket.BinaryMessage, long)
				_ = c.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
				_ = c.WriteMessage(websocket.BinaryMessage, short)
				close(sent)
				_, _, _ = c.ReadMessage() // until the client closes
			}))
			var conf *tls.Config
			if secure {
				srv.StartTLS()
				conf = srv.Client().Transport.(*http.Transport).TLSClientConfig
			} else {
				srv.Start()
			}
			defer srv.Close()
			base := strings.Replace(srv.URL, "https://", "http://", 1)
			if secure {
				base = srv.URL
			}
			w := &wsCarrier{ctx: context.Background(), dial: newWSDialer(base, conf, "")}
			w.dial.url = "ws" + strings.TrimPrefix(base, "http") + "/"
			defer w.CloseResponse()
			if err := w.Send(&fencelockv1.SessionRequest{Ping: true}); err != nil {
				t.Fatal(err)
			}
			if !w.Dialed() {
				t.Fatal("a carrier that sent is not dialed")
			}

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			start := time.Now()
			err := w.Wait(ctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
				t.Fatalf("Wait with nothing sent: %v after %v, want its context's end at 100ms", err, time.Since(start))
			}

			close(send)
			<-sent // all of it is on its way before the client reads any
			time.Sleep(50 * time.Millisecond)
			for i, want := range [][]byte{long, short} {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := w.Wait(ctx)
				cancel()
				if err != nil { // for the second: gorilla holds it, and nothing more comes
					t.Fatalf("message %d: Wait: %v", i, err)
				}
				m, err := w.Receive()
				if err != nil {
					t.Fatalf("message %d: Receive after a Wait that ended with its context: %v", i, err)
				}
				if b, _ := proto.Marshal(m); string(b) != string(want) {
					t.Fatalf("message %d: %d bytes, want %d", i, len(b), len(want))
				}
			}
		})
	}
}

// TestFrameHeader parses each length form, the mask bit, and reports a
// header that has not come whole.
func TestFrameHeader(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		b      []byte
		hl     int
		pl     int64
		fin    bool
		op     byte
		whole  bool
		reason string
	}{
		{[]byte{0x82, 5}, 2, 5, true, 2, true, "short binary"},
		{[]byte{0x02, 126, 1, 0}, 4, 256, false, 2, true, "16-bit length, not final"},
		{[]byte{0x89, 127, 0, 0, 0, 0, 0, 1, 0, 0}, 10, 65536, true, 9, true, "64-bit length, ping"},
		{[]byte{0x82, 0x85, 1, 2, 3, 4}, 6, 5, true, 2, true, "masked"},
		{[]byte{0x82, 0x85, 1, 2}, 0, 0, false, 0, false, "mask key cut"},
		{[]byte{0x82, 126, 1}, 0, 0, false, 0, false, "length cut"},
		{[]byte{0x82}, 0, 0, false, 0, false, "one byte"},
	} {
		hl, pl, fin, op, ok := frameHeader(c.b)
		if hl != c.hl || pl != c.pl || fin != c.fin || op != c.op || ok != c.whole {
			t.Errorf("%s: got %d %d %v %d %v", c.reason, hl, pl, fin, op, ok)
		}
	}
}

// TestFrameConn_HandsOnOneFrameAtATime: a Read hands on the answer to
// the upgrade, then each frame, never past its end, however much has
// come; ready holds once a whole message has come (a message of two
// frames, with a ping between them, is whole at its final frame).
func TestFrameConn_HandsOnOneFrameAtATime(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	fc := newFrameConn(a)
	head := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"
	first := append([]byte{0x82, 5}, "hello"...)                    // final, binary
	start := append([]byte{0x02, 126, 1, 44}, make([]byte, 300)...) // not final: a message begins
	ping := []byte{0x89, 0}
	end := append([]byte{0x80, 2}, "!!"...) // final continuation
	go b.Write([]byte(head + string(first) + string(start) + string(ping) + string(end)))
	p := make([]byte, 16<<10)
	for i, want := range []int{len(head), len(first), len(start), len(ping), len(end)} {
		n, err := fc.Read(p)
		if err != nil || n != want {
			t.Fatalf("read %d: %d bytes, %v; want %d, the rest of one frame", i, n, err, want)
		}
		switch i {
		case 0, 1:
			if !fc.ready() {
				t.Fatalf("after read %d: a whole message has come, ready is false", i)
			}
		case 2, 3:
			if !fc.ready() { // the final frame of the message has come too
				t.Fatalf("after read %d: ready is false", i)
			}
		}
	}
	if fc.ready() {
		t.Fatal("ready with nothing left")
	}
}

// TestFrameConn_RefusesWhatIsNoUpgrade: an answer other than 101 is
// handed on as it comes (its body is no frames), and a frame longer than
// a message may be is an error, not a panic.
func TestFrameConn_RefusesWhatIsNoUpgrade(t *testing.T) {
	t.Parallel()
	read := func(stream string) (string, error) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		fc := newFrameConn(a)
		go b.Write([]byte(stream))
		var got []byte
		p := make([]byte, 1024)
		for len(got) < len(stream) {
			n, err := fc.Read(p)
			got = append(got, p[:n]...)
			if err != nil {
				return string(got), err
			}
		}
		return string(got), nil
	}
	busy := "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 3\r\n\r\n\x82\x7f\xff"
	if got, err := read(busy); err != nil || got != busy {
		t.Errorf("a 503 answer: %q, %v; want all of it", got, err)
	}
	huge := "HTTP/1.1 101 Switching Protocols\r\n\r\n\x82\x7f\x7f\xff\xff\xff\xff\xff\xff\xff"
	if _, err := read(huge); !errors.Is(err, errFrameTooLong) {
		t.Errorf("a frame of 2^63 bytes: %v, want errFrameTooLong", err)
	}
}
