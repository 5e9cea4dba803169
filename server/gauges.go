package server

import (
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// gauges reads the node's state at scrape time: nothing to keep in step.
type gauges struct {
	s                                         *Server
	held, waiting, state, leader, term, index *prometheus.Desc
	contact                                   *prometheus.Desc
}

// raftStates are the values of fencelock_raft_state's label.
var raftStates = []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}

func newGauges(s *Server) *gauges {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &gauges{s: s,
		held:    d("fencelock_locks_held", "Locks held, as this node's replica of the lock table has them."),
		waiting: d("fencelock_waiters", "Requests waiting in the locks' queues, as this node's replica has them."),
		state:   d("fencelock_raft_state", "1 for this node's Raft state, 0 for the others.", "state"),
		leader:  d("fencelock_raft_leader", "1 if this node is the Raft leader."),
		term:    d("fencelock_raft_term", "The Raft term this node is in."),
		index:   d("fencelock_raft_index", "This node's Raft indexes: commit (known committed) and applied.", "kind"),
		contact: d("fencelock_raft_last_contact_seconds", "Time since this follower last heard from the leader (0 on the leader)."),
	}
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.held, g.waiting, g.state, g.leader, g.term, g.index, g.contact} {
		ch <- d
	}
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	s := g.s
	if s.raft == nil || s.fsm == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	held, waiting := s.fsm.Counts()
	gauge(g.held, float64(held))
	gauge(g.waiting, float64(waiting))
	state := s.raft.State()
	for _, st := range raftStates {
		gauge(g.state, b2f(st == state), strings.ToLower(st.String()))
	}
	gauge(g.leader, b2f(state == raft.Leader))
	gauge(g.term, float64(s.raft.CurrentTerm()))
	gauge(g.index, float64(s.raft.CommitIndex()), "commit")
	gauge(g.index, float64(s.fsm.AppliedIndex()), "applied")
	contact := 0.0
	if state != raft.Leader {
		if lc := s.raft.LastContact(); !lc.IsZero() {
			contact = time.Since(lc).Seconds()
		}
	}
	gauge(g.contact, contact)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
