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
	"sync"
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
	// maxPipeWaits bounds the Acquire calls waiting on one pipe; more are
	// refused (unavailable) rather than holding up the pipe's batches.
	maxPipeWaits = 4096
	// pipeIdle: a pipe with no request for this long is closed (the client
	// dials again when it needs one).
	pipeIdle = 10 * time.Minute
	// pipeWriteTimeout bounds writing one answer to a client that does not
	// read; the pipe is then closed.
	pipeWriteTimeout = 10 * time.Second
)

// errPipeClosed is why a wait on a pipe ends when the pipe closes under it:
// the connection broke, not the caller (who sends a cancel frame).
var errPipeClosed = errors.New("pipe closed")

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
	// Waits end when the pipe closes, with errPipeClosed as the cause (a
	// wait that keeps its place then keeps it for the client's retry); when
	// the node stops, they end as every wait does (not_leader), and keep
	// their place for the next leader.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer func() {
		if s.ctx.Err() == nil {
			cancel(errPipeClosed)
			return
		}
		// Stopping: Close ends the waits; one that started too late for
		// that ends shortly after.
		time.AfterFunc(time.Second, func() { cancel(errPipeClosed) })
	}()
	p := &pipe{s: s, ctx: ctx, conn: conn, w: wire.NewFrameWriter(brw.Writer), waits: map[uint64]context.CancelFunc{}}
	err = p.serve(brw.Reader)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && s.ctx.Err() == nil {
		s.log.Debug("pipe closed", "remote", r.RemoteAddr, "err", err)
	}
}

// pipe is one upgraded connection.
type pipe struct {
	s    *Server
	ctx  context.Context // ends with the connection
	conn net.Conn
	w    *wire.FrameWriter

	mu    sync.Mutex
	waits map[uint64]context.CancelFunc // acquire requests waiting, by id
}

// serve reads requests and runs each in its own goroutine, at most
// maxPipeInFlight at once; answers go out as they finish.
func (p *pipe) serve(br *bufio.Reader) error {
	sem := make(chan struct{}, maxPipeInFlight)
	var frame wire.Frame
	for {
		req := new(fencelockv1.PipeRequest)
		// Idle only counts while nothing waits: a wait may rightly last
		// long with no frame.
		p.mu.Lock()
		idle := len(p.waits) == 0
		p.mu.Unlock()
		if idle {
			_ = p.conn.SetReadDeadline(time.Now().Add(pipeIdle))
		} else {
			_ = p.conn.SetReadDeadline(time.Time{})
		}
		if err := frame.Read(br, req, maxMessageBytes); err != nil {
			return err
		}
		switch {
		case req.Cancel != 0:
			p.cancel(req.Cancel)
		case req.Acquire != nil:
			if err := p.wait(req); err != nil {
				return err
			}
		default:
			sem <- struct{}{}
			// The entries are proposed here, before the next frame is read:
			// they reach Raft without a hand-off to another goroutine.
			r, err := (*api)(p.s).startBatch(req.GetBatch().GetItems())
			go p.finish(req.Id, r, err, func() { <-sem })
		}
	}
}

// send writes an answer; a client that does not read it in time loses the
// pipe.
func (p *pipe) send(resp *fencelockv1.PipeResponse) {
	_ = p.conn.SetWriteDeadline(time.Now().Add(pipeWriteTimeout))
	if err := p.w.Send(resp); err != nil {
		p.conn.Close() // ends the read loop
	}
}

// wait runs an acquire request as the Acquire method would, in its own
// goroutine, until it is answered, cancelled or the pipe closes. A frame id
// already waiting is an error that ends the pipe (its cancel frames could
// not say which wait they end); a wait past maxPipeWaits is refused, by
// the reader itself, so that a client that sends them without reading the
// answers stops being read.
func (p *pipe) wait(req *fencelockv1.PipeRequest) error {
	var ctx context.Context
	var cancel context.CancelFunc
	if d := req.GetTimeout().AsDuration(); req.Timeout != nil && d > 0 {
		ctx, cancel = context.WithTimeout(p.ctx, d)
	} else {
		ctx, cancel = context.WithCancel(p.ctx)
	}
	p.mu.Lock()
	_, reused := p.waits[req.Id]
	full := len(p.waits) >= maxPipeWaits
	if !reused && !full {
		p.waits[req.Id] = cancel
	}
	p.mu.Unlock()
	if reused {
		cancel()
		return fmt.Errorf("acquire frame id %d sent again while its wait goes on: %w", req.Id, fencelock.ErrInvalidArgument)
	}
	if full {
		cancel()
		err := fmt.Errorf("%d acquire calls wait on this pipe already: %w", maxPipeWaits, fencelock.ErrUnavailable)
		(*api)(p.s).count("Acquire", err)
		p.send(&fencelockv1.PipeResponse{Id: req.Id, Error: wire.ToBatchError(err)})
		return nil
	}
	go func() {
		defer func() {
			p.mu.Lock()
			delete(p.waits, req.Id)
			p.mu.Unlock()
			cancel()
		}()
		g, err := p.s.Acquire(ctx, acquireRequest(req.Acquire))
		if err != nil {
			(*api)(p.s).count("Acquire", err)
			p.send(&fencelockv1.PipeResponse{Id: req.Id, Error: wire.ToBatchError(err)})
			return
		}
		p.send(&fencelockv1.PipeResponse{Id: req.Id, Acquire: acquireResponse(g)})
	}()
	return nil
}

// cancel ends the wait of acquire request id: its caller gave up.
func (p *pipe) cancel(id uint64) {
	p.mu.Lock()
	cancel := p.waits[id]
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// finish answers batch request id (started as r, or refused with err)
// once its entries are applied; a batch not done within ApplyTimeout, or
// when the node stops, is answered unavailable instead, as a Connect Batch
// call would be (the client asks again or another node). The bounds are
// timers, not another goroutine between the entries and the answer.
// answered frees the batch's place on the pipe once it is answered (its
// entries may still be out, with a disk that stalls).
func (p *pipe) finish(id uint64, r *batchRun, err error, answered func()) {
	var once sync.Once
	answer := func(resp *fencelockv1.PipeResponse, err error) {
		once.Do(func() {
			if err != nil {
				(*api)(p.s).count("Batch", err)
				resp = &fencelockv1.PipeResponse{Id: id, Error: wire.ToBatchError(err)}
			}
			p.send(resp)
			answered()
		})
	}
	fail := func(err error) { answer(nil, err) }
	if err != nil {
		fail(err)
		return
	}
	timer := time.AfterFunc(p.s.cfg.ApplyTimeout, func() { fail(r.timedOut()) })
	defer timer.Stop()
	stop := context.AfterFunc(p.s.ctx, func() { fail(fmt.Errorf("node stopping: %w", fencelock.ErrUnavailable)) })
	defer stop()
	r.finish()
	answer(&fencelockv1.PipeResponse{Id: id, Batch: &fencelockv1.BatchResponse{Results: r.out}}, nil)
}
