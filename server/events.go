package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// maxEvents bounds the ring of recent events the dashboard shows.
const maxEvents = 256

// Event is one thing that happened to a lock on this node: a grant, a
// release, an expiry, a take-back or a refused request.
type Event struct {
	Time   time.Time       `json:"time"`
	Kind   string          `json:"kind"` // grant, release, expiry, take-back, refusal
	Lock   string          `json:"lock,omitempty"`
	Token  fencelock.Token `json:"token,omitempty"`
	Holder string          `json:"holder,omitempty"`
	// Identity is the caller the event is due to, with an ACL: the owner
	// of a grant, who released, who changed the membership.
	Identity string `json:"identity,omitempty"`
	Detail   string `json:"detail,omitempty"` // for a refusal: the method and the error code
}

// record keeps ev in the ring of recent events and writes it to the log as
// an audit line (never with request or lease ids).
func (s *Server) record(ev Event) {
	s.events.add(ev)
	if s.log.Enabled(context.Background(), slog.LevelInfo) { // the arguments cost a busy node 4 % of its allocations
		s.log.Info("audit", "kind", ev.Kind, "lock", ev.Lock, "token", uint64(ev.Token), "holder", ev.Holder,
			"identity", ev.Identity, "detail", ev.Detail)
	}
}

// events keeps the last maxEvents events, for the dashboard.
type events struct {
	mu   sync.Mutex
	ring [maxEvents]Event
	next int // total events recorded
}

func (e *events) add(ev Event) {
	ev.Time = time.Now()
	e.mu.Lock()
	e.ring[e.next%maxEvents] = ev
	e.next++
	e.mu.Unlock()
}

// recent returns the events kept, newest first.
func (e *events) recent() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := min(e.next, maxEvents)
	out := make([]Event, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, e.ring[(e.next-i)%maxEvents])
	}
	return out
}

// Events returns the node's recent events (at most 256), newest first.
// Grants are recorded by every node as it applies them; releases,
// expiries, take-backs and refusals by the node that served them.
func (s *Server) Events() []Event { return s.events.recent() }

// Refused counts a request of method refused with err, by method and error
// code (fencelock_rejected_requests_total), and records it as an event. A
// call whose caller went away (code "canceled") is counted, but it is not
// a refusal and makes no event; neither is not_leader.
func (s *Server) Refused(method string, err error) {
	code := fencelock.Code(err)
	switch {
	case code != "":
	case errors.Is(err, context.Canceled):
		code = "canceled"
	default:
		code = "other"
	}
	s.metrics.rejected.WithLabelValues(method, code).Inc()
	if code != fencelock.CodeNotLeader && code != "canceled" {
		ev := Event{Kind: "refusal", Detail: method + ": " + code}
		var held *fencelock.LockHeldError
		if errors.As(err, &held) {
			ev.Lock, ev.Token, ev.Holder = string(held.Name), held.Token, held.Holder
		}
		s.record(ev)
	}
}
