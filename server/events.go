package server

import (
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
	s.log.Info("audit", "kind", ev.Kind, "lock", ev.Lock, "token", uint64(ev.Token), "holder", ev.Holder,
		"identity", ev.Identity, "detail", ev.Detail)
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
