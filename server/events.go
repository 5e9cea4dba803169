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
	Detail string          `json:"detail,omitempty"` // for a refusal: the method and the error code
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
