package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// The pipe carries the Go client's batches on a bare framed stream instead
// of one HTTP request each: the same Batch, without HTTP's per-request
// parsing, headers and envelopes, which cost more than the batch itself on a
// small machine (see docs/PERFORMANCE.md). It is an HTTP/1.1 upgrade on the
// API port, so it needs no port or address of its own and follows the same
// redirects. See PipeRequest in the API for the framing.

const (
	// maxPipeInFlight bounds the batches one pipe runs at once; the
	// connection is not read further until one finishes.
	maxPipeInFlight = 64
	// pipeIdle: a pipe with no request for this long is closed (the client
	// dials again when it needs one).
	pipeIdle = 10 * time.Minute
	// pipeWriteTimeout bounds writing one answer to a client that does not
	// read; the pipe is then closed.
	pipeWriteTimeout = 10 * time.Second
)

// servePipe upgrades the request's connection to a pipe and serves it until
// the client closes it or the node stops.
func (s *Server) servePipe(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || !strings.EqualFold(r.Header.Get("Upgrade"), wire.PipeProtocol) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", wire.PipeProtocol)
		http.Error(w, "this path speaks "+wire.PipeProtocol+" after an HTTP/1.1 upgrade", http.StatusUpgradeRequired)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot upgrade this connection: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	// The server's read deadline (if any) was for the request's header.
	_ = conn.SetDeadline(time.Time{})
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + wire.PipeProtocol + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	stop := context.AfterFunc(s.ctx, func() { conn.Close() })
	defer stop()
	s.metrics.pipes.Inc()
	defer s.metrics.pipes.Dec()
	p := &pipe{s: s, conn: conn, w: wire.NewFrameWriter(brw.Writer)}
	err = p.serve(brw.Reader)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && s.ctx.Err() == nil {
		s.log.Debug("pipe closed", "remote", r.RemoteAddr, "err", err)
	}
}

// pipe is one upgraded connection.
type pipe struct {
	s    *Server
	conn net.Conn
	w    *wire.FrameWriter
}

// serve reads requests and runs each in its own goroutine, at most
// maxPipeInFlight at once; answers go out as they finish.
func (p *pipe) serve(br *bufio.Reader) error {
	sem := make(chan struct{}, maxPipeInFlight)
	var frame wire.Frame
	for {
		req := new(fencelockv1.PipeRequest)
		_ = p.conn.SetReadDeadline(time.Now().Add(pipeIdle))
		if err := frame.Read(br, req, maxMessageBytes); err != nil {
			return err
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			resp := p.run(req)
			_ = p.conn.SetWriteDeadline(time.Now().Add(pipeWriteTimeout))
			if err := p.w.Send(resp); err != nil {
				p.conn.Close() // ends the read loop
			}
		}()
	}
}

// run runs one request as Batch would.
func (p *pipe) run(req *fencelockv1.PipeRequest) *fencelockv1.PipeResponse {
	a := (*api)(p.s)
	resp, err := a.batch(p.s.ctx, req.GetBatch().GetItems())
	if err != nil && p.s.ctx.Err() != nil {
		// The node is stopping: the client asks another (a Connect call
		// would see its connection break).
		err = fmt.Errorf("node stopping: %w", fencelock.ErrUnavailable)
	}
	if err != nil {
		a.count("Batch", err)
		return &fencelockv1.PipeResponse{Id: req.Id, Error: wire.ToBatchError(err)}
	}
	return &fencelockv1.PipeResponse{Id: req.Id, Batch: resp}
}
