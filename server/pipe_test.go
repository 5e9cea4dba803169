package server_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/server"
)

// openPipe upgrades a new connection to addr's pipe, by hand.
func openPipe(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+wire.PipePath, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.PipeProtocol)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != wire.PipeProtocol {
		t.Fatalf("upgrade answered %s, Upgrade %q; want 101 and %q", resp.Status, resp.Header.Get("Upgrade"), wire.PipeProtocol)
	}
	return conn, br
}

// TestPipe_AnswersEachRequestByID: requests sent back to back on one pipe
// run as Batch requests would, and each answer carries its request's id,
// whatever order they finish in; a batch refused as a whole is answered
// with its error, and the pipe goes on.
func TestPipe_AnswersEachRequestByID(t *testing.T) {
	srv := testproc.StartServer(t)
	conn, br := openPipe(t, srv.Addr)
	w := wire.NewFrameWriter(bufio.NewWriter(conn))
	tooMany := make([]*fencelockv1.BatchItem, server.MaxBatchItems+1)
	for i := range tooMany {
		tooMany[i] = &fencelockv1.BatchItem{}
	}
	sent := map[uint64][]*fencelockv1.BatchItem{
		7: {acquireItem("p-a", "r1", 0), acquireItem("bad name\x00", "r2", 0)},
		3: {acquireItem("p-b", "r3", 0)},
		9: tooMany,
		4: {acquireItem("p-a", "r4", 0)}, // sent after 7: finds p-a held
	}
	for _, id := range []uint64{7, 3, 9, 4} {
		if err := w.Send(&fencelockv1.PipeRequest{Id: id, Batch: &fencelockv1.BatchRequest{Items: sent[id]}}); err != nil {
			t.Fatal(err)
		}
		if id == 7 {
			time.Sleep(200 * time.Millisecond) // so that 7's acquire of p-a commits first
		}
	}
	got := map[uint64]*fencelockv1.PipeResponse{}
	var frame wire.Frame
	for len(got) < len(sent) {
		resp := new(fencelockv1.PipeResponse)
		if err := frame.Read(br, resp, 1<<20); err != nil {
			t.Fatalf("reading answers (have %d of %d): %v", len(got), len(sent), err)
		}
		if _, ok := sent[resp.Id]; !ok || got[resp.Id] != nil {
			t.Fatalf("answer with id %d: not a request sent, or answered twice", resp.Id)
		}
		got[resp.Id] = resp
	}
	r7 := got[7].GetBatch().GetResults()
	if len(r7) != 2 || r7[0].GetAcquire().GetGrant().GetName() != "p-a" {
		t.Fatalf("request 7 answered %v, want a grant of p-a and an error", got[7])
	}
	if err := wire.FromBatchError(r7[1].GetError()); !errors.Is(err, fencelock.ErrInvalidName) {
		t.Fatalf("request 7's bad name = %v, want ErrInvalidName", err)
	}
	if g := got[3].GetBatch().GetResults(); len(g) != 1 || g[0].GetAcquire().GetGrant().GetName() != "p-b" {
		t.Fatalf("request 3 answered %v, want a grant of p-b", got[3])
	}
	if err := wire.FromBatchError(got[9].GetError()); got[9].GetBatch() != nil || !errors.Is(err, fencelock.ErrTooLarge) {
		t.Fatalf("request 9 (%d items) answered %v, want the batch refused with ErrTooLarge", len(tooMany), got[9])
	}
	var held *fencelock.LockHeldError
	r4 := got[4].GetBatch().GetResults()
	if len(r4) != 1 || !errors.As(wire.FromBatchError(r4[0].GetError()), &held) || held.Token != fencelock.Token(r7[0].GetAcquire().GetGrant().GetToken()) {
		t.Fatalf("request 4 answered %v, want lock_held by request 7's grant", got[4])
	}
}

// TestPipe_RefusesWhatIsNotAPipe: a plain request to the pipe's path is
// told to upgrade; a frame over the size limit ends the connection without
// an answer.
func TestPipe_RefusesWhatIsNotAPipe(t *testing.T) {
	srv := testproc.StartServer(t)
	resp, err := http.Get("http://" + srv.Addr + wire.PipePath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Upgrade") != wire.PipeProtocol {
		t.Fatalf("GET without upgrade answered %s, Upgrade %q; want 426 and %q", resp.Status, resp.Header.Get("Upgrade"), wire.PipeProtocol)
	}

	conn, br := openPipe(t, srv.Addr)
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], 1<<20) // 1 MiB, over the 64 KiB limit
	if _, err := conn.Write(head[:]); err != nil {
		t.Fatal(err)
	}
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after an oversized frame the node sent %d bytes (%v), want the connection closed", n, err)
	}

	// A frame that does not decode ends the connection too.
	conn, br = openPipe(t, srv.Addr)
	binary.BigEndian.PutUint32(head[:], 3)
	if _, err := conn.Write(append(head[:], 0xff, 0xff, 0xff)); err != nil {
		t.Fatal(err)
	}
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after a frame that does not decode the node sent %d bytes (%v), want the connection closed", n, err)
	}
}

// TestPipe_AcquireWaitsAndCancels: an acquire request on the pipe waits in
// the lock's queue as a unary Acquire does, while the pipe serves other
// requests; a cancel frame ends its wait and takes it out of the queue; a
// release grants the one still waiting, whose answer then comes.
func TestPipe_AcquireWaitsAndCancels(t *testing.T) {
	srv := testproc.StartServer(t)
	ctx := ctxFor(t, 30*time.Second)
	holder := rawAcquire(t, srv.Addr, "w", "holder", time.Minute)
	conn, br := openPipe(t, srv.Addr)
	w := wire.NewFrameWriter(bufio.NewWriter(conn))
	send := func(m *fencelockv1.PipeRequest) {
		t.Helper()
		if err := w.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	var frame wire.Frame
	read := func() *fencelockv1.PipeResponse {
		t.Helper()
		resp := new(fencelockv1.PipeResponse)
		if err := frame.Read(br, resp, 1<<20); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	c := newClient(t, srv.Addr)
	waiters := func(n int) {
		t.Helper()
		waitFor(t, func() bool {
			li, err := c.Describe(ctx, "w")
			return err == nil && len(li.Waiters) == n
		})
	}
	acquire := func(rid string) *fencelockv1.AcquireRequest {
		m := acquireItem("w", rid, time.Minute).GetAcquire()
		m.KeepPlace = true
		return m
	}
	send(&fencelockv1.PipeRequest{Id: 1, Acquire: acquire("r1")})
	waiters(1)
	send(&fencelockv1.PipeRequest{Id: 2, Acquire: acquire("r2")})
	waiters(2)

	// The pipe still serves batches while both wait.
	send(&fencelockv1.PipeRequest{Id: 3, Batch: &fencelockv1.BatchRequest{Items: []*fencelockv1.BatchItem{acquireItem("other", "r3", 0)}}})
	if r := read(); r.Id != 3 || r.GetBatch().GetResults()[0].GetAcquire().GetGrant().GetName() != "other" {
		t.Fatalf("batch sent while two acquires wait answered %v, want id 3 granted", r)
	}

	send(&fencelockv1.PipeRequest{Cancel: 2})
	if r := read(); r.Id != 2 || r.Error == nil {
		t.Fatalf("after cancel of request 2, the answer is %v; want request 2 ended with an error", r)
	}
	waiters(1)

	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.Addr)
	if _, err := rpc.Release(ctx, connect.NewRequest(&fencelockv1.ReleaseRequest{Name: "w", LeaseId: holder.LeaseId, Token: holder.Token})); err != nil {
		t.Fatal(wire.FromConnect(err))
	}
	r := read()
	if g := r.GetAcquire().GetGrant(); r.Id != 1 || g.GetName() != "w" || g.GetToken() <= holder.Token {
		t.Fatalf("after the release, the answer is %v; want request 1 granted w with a token above %d", r, holder.Token)
	}
	li, err := c.Describe(ctx, "w")
	if err != nil || li.Token != fencelock.Token(r.GetAcquire().GetGrant().GetToken()) || len(li.Waiters) != 0 {
		t.Fatalf("w is %+v (%v); want held by request 1's grant, nobody waiting (the cancelled request left)", li, err)
	}
}

// TestPipe_BrokenPipeKeepsAWaitersPlace: when a pipe breaks under a wait
// that keeps its place (the client's), the request stays in the queue for
// the client's retry on a new pipe, which gets the grant; a wait whose
// caller cancels leaves (TestPipe_AcquireWaitsAndCancels).
func TestPipe_BrokenPipeKeepsAWaitersPlace(t *testing.T) {
	srv := testproc.StartServer(t)
	ctx := ctxFor(t, 30*time.Second)
	holder := rawAcquire(t, srv.Addr, "kept", "holder", time.Minute)
	m := acquireItem("kept", "r1", time.Minute).GetAcquire()
	m.KeepPlace = true
	conn, _ := openPipe(t, srv.Addr)
	if err := wire.NewFrameWriter(bufio.NewWriter(conn)).Send(&fencelockv1.PipeRequest{Id: 1, Acquire: m}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv.Addr)
	waiters := func() int {
		li, err := c.Describe(ctx, "kept")
		if err != nil {
			t.Fatal(err)
		}
		return len(li.Waiters)
	}
	waitFor(t, func() bool { return waiters() == 1 })
	conn.Close()
	time.Sleep(500 * time.Millisecond)
	if n := waiters(); n != 1 {
		t.Fatalf("after the pipe broke, %d waiters; want the request still queued for the retry", n)
	}
	conn2, br2 := openPipe(t, srv.Addr)
	if err := wire.NewFrameWriter(bufio.NewWriter(conn2)).Send(&fencelockv1.PipeRequest{Id: 1, Acquire: m}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the retry is waiting
	if n := waiters(); n != 1 {
		t.Fatalf("the retry on a new pipe made %d waiters, want the same one", n)
	}
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.Addr)
	if _, err := rpc.Release(ctx, connect.NewRequest(&fencelockv1.ReleaseRequest{Name: "kept", LeaseId: holder.LeaseId, Token: holder.Token})); err != nil {
		t.Fatal(wire.FromConnect(err))
	}
	var frame wire.Frame
	resp := new(fencelockv1.PipeResponse)
	if err := frame.Read(br2, resp, 1<<20); err != nil {
		t.Fatal(err)
	}
	if g := resp.GetAcquire().GetGrant(); g.GetName() != "kept" || g.GetToken() <= holder.Token {
		t.Fatalf("the retry got %v, want the grant of kept", resp)
	}
}

// TestPipe_AcquireTimeoutEndsTheWait: an acquire's timeout (the caller's
// deadline) ends its wait on the node even if no cancel frame comes, and
// the request leaves the queue, as a Connect call past its deadline does.
func TestPipe_AcquireTimeoutEndsTheWait(t *testing.T) {
	srv := testproc.StartServer(t)
	ctx := ctxFor(t, 30*time.Second)
	rawAcquire(t, srv.Addr, "timed", "holder", time.Minute)
	conn, br := openPipe(t, srv.Addr)
	m := acquireItem("timed", "r1", time.Minute).GetAcquire()
	start := time.Now()
	if err := wire.NewFrameWriter(bufio.NewWriter(conn)).Send(&fencelockv1.PipeRequest{Id: 1, Acquire: m, Timeout: durationpb.New(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	var frame wire.Frame
	resp := new(fencelockv1.PipeResponse)
	if err := frame.Read(br, resp, 1<<20); err != nil {
		t.Fatal(err)
	}
	if resp.Error == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("acquire with a 300 ms timeout and a 1 min wait answered %v after %v; want an error within the timeout", resp, time.Since(start))
	}
	li, err := newClient(t, srv.Addr).Describe(ctx, "timed")
	if err != nil || len(li.Waiters) != 0 {
		t.Fatalf("timed is %+v (%v); want no waiter left", li, err)
	}
}
