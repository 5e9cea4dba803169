package api_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/server"
	"github.com/gorilla/websocket"
)

// servedFrom serves n's handler over HTTP/1.1 as if every caller called
// from remote (host:port), and returns its URL.
func servedFrom(t *testing.T, n *fencelocktest.Node, remote string) string {
	t.Helper()
	h := api.Handler(n.Server)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = remote
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestAdminSurfaces_needTheAdminTokenOffTheMachine: without an admin
// token or a policy, key rotation, backups and the audit trail are refused
// to a caller that is not on loopback, and Status hides Raft addresses
// from it; a loopback caller gets them.
func TestAdminSurfaces_needTheAdminTokenOffTheMachine(t *testing.T) {
	t.Parallel()
	n := fencelocktest.StartNode(t)
	for remote, want := range map[string]connect.Code{"10.0.0.7:5000": connect.CodeUnauthenticated, "127.0.0.1:5000": 0} {
		url := servedFrom(t, n, remote)
		cs := fencelockv1connect.NewClusterServiceClient(http.DefaultClient, url)
		backup, err := cs.Backup(t.Context(), connect.NewRequest(&fencelockv1.BackupRequest{}))
		if err == nil {
			for backup.Receive() {
			}
			err = backup.Err()
			backup.Close()
		}
		if want == 0 && err != nil || want != 0 && connect.CodeOf(err) != want {
			t.Errorf("Backup from %s: %v, want code %v", remote, err, want)
		}
		resp, err := http.Get(url + "/ui/events")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if wantHTTP := map[connect.Code]int{0: 200, connect.CodeUnauthenticated: 401}[want]; resp.StatusCode != wantHTTP {
			t.Errorf("/ui/events from %s: %d, want %d", remote, resp.StatusCode, wantHTTP)
		}
		st, err := cs.Status(t.Context(), connect.NewRequest(&fencelockv1.StatusRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if hidden := st.Msg.Members[0].RaftAddr == ""; hidden != (want != 0) {
			t.Errorf("Status from %s: Raft address %q", remote, st.Msg.Members[0].RaftAddr)
		}
	}
	url := servedFrom(t, n, "10.0.0.7:5000")
	cs := fencelockv1connect.NewClusterServiceClient(http.DefaultClient, url)
	if _, err := cs.RotateKey(t.Context(), connect.NewRequest(&fencelockv1.RotateKeyRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("RotateKey from off the machine: %v, want unauthenticated", err)
	}
	if k := n.Server.Keys().Keys; len(k) != 1 {
		t.Fatalf("%d keys after a refused rotation, want 1", len(k))
	}
}

// TestUIEvents_forAdminsOnly: with a policy, the audit trail is refused
// to a caller without admin (403) and served to an admin.
func TestUIEvents_forAdminsOnly(t *testing.T) {
	t.Parallel()
	hash := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	policy, err := acl.Parse(strings.NewReader("billing "+hash("b-secret")+"\nops "+hash("o-secret")+"\n"),
		strings.NewReader("billing lock,read billing/\nops admin *\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := fencelocktest.StartNode(t, func(c *server.Config) { c.ACL = policy })
	url := servedFrom(t, n, "127.0.0.1:5000")
	for tok, want := range map[string]int{"b-secret": 403, "o-secret": 200, "": 401} {
		req, _ := http.NewRequest(http.MethodGet, url+"/ui/events", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("/ui/events with token %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
}

// TestHTTPServer_closesSilentConnections: a connection that sends no
// request is closed once the header timeout passes, not held forever.
func TestHTTPServer_closesSilentConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := api.HTTPServer(http.NotFoundHandler())
	go hs.Serve(ln)
	defer hs.Close()
	if hs.IdleTimeout <= 0 || hs.ReadHeaderTimeout <= 0 {
		t.Fatalf("idle timeout %v, header timeout %v: want both set", hs.IdleTimeout, hs.ReadHeaderTimeout)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(hs.ReadHeaderTimeout + 10*time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a silent connection was still open %v later", time.Since(start).Round(time.Second))
	}
}

// countingReader hands out n zero bytes... forever, counting what was read.
type countingReader struct{ read atomic.Int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	c.read.Add(int64(len(p)))
	return len(p), nil
}

// TestHandler_doesNotDrainAHugeBody: a unary call whose body claims a
// gigabyte is refused after a message's worth, not read to its end.
func TestHandler_doesNotDrainAHugeBody(t *testing.T) {
	t.Parallel()
	n := fencelocktest.StartNode(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := api.HTTPServer(api.Handler(n.Server))
	go hs.Serve(ln)
	defer hs.Close()
	h2c := &http.Client{Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	body := &countingReader{}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+"/fencelock.v1.LockService/Acquire", io.LimitReader(body, 1<<30))
	req.ContentLength = 1 << 30
	req.Header.Set("Content-Type", "application/json")
	resp, err := h2c.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("a gigabyte body was accepted")
		}
	}
	if n := body.read.Load(); n > 8<<20 {
		t.Fatalf("the node read %d bytes of a body it refused, want at most a few messages' worth", n)
	}
}

// TestWebSocket_authenticatedAsEveryCall: the Session WebSocket is
// upgraded from a request that passes the node's middleware: under a
// policy, a stream without a token has its calls refused and one with
// billing's token is granted billing's locks; a browser page of another
// origin cannot upgrade at all.
func TestWebSocket_authenticatedAsEveryCall(t *testing.T) {
	t.Parallel()
	hash := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	policy, err := acl.Parse(strings.NewReader("billing "+hash("b-secret")+"\n"), strings.NewReader("billing lock,read billing/\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := fencelocktest.StartNode(t, func(c *server.Config) { c.ACL = policy })
	url := "ws://" + n.Addr + api.WebSocketPath
	acquire := func(header http.Header) (*fencelockv1.Result, error) {
		c, resp, err := websocket.DefaultDialer.DialContext(t.Context(), url, header)
		if err != nil {
			return nil, fmt.Errorf("upgrade: %w (%v)", err, resp)
		}
		defer c.Close()
		call := &fencelockv1.Call{Id: 1, Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{
			Name: "billing/a", Ttl: durationpb.New(time.Minute)}}}
		b, _ := proto.Marshal(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{call}})
		if err := c.WriteMessage(websocket.BinaryMessage, b); err != nil {
			return nil, err
		}
		_, b, err = c.ReadMessage()
		if err != nil {
			return nil, err
		}
		m := &fencelockv1.SessionResponse{}
		if err := proto.Unmarshal(b, m); err != nil || len(m.Results) != 1 {
			return nil, fmt.Errorf("answer %v, %v", m, err)
		}
		return m.Results[0], nil
	}
	r, err := acquire(nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := wire.FromStatus(r.GetError()); !errors.Is(e, fencelock.ErrUnauthenticated) {
		t.Fatalf("an acquire without a token: %v, want unauthenticated", r)
	}
	r, err = acquire(http.Header{"Authorization": {"Bearer b-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetAcquire().GetGrant().GetToken() == 0 {
		t.Fatalf("billing's acquire of billing/a: %v, want a grant", r)
	}
	_, resp, err := websocket.DefaultDialer.DialContext(t.Context(), url, http.Header{"Origin": {"https://evil.example"}, "Authorization": {"Bearer b-secret"}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an upgrade from another origin: %v (%v), want 403", err, resp)
	}
}
