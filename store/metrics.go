package store

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the store's Prometheus metrics, in a registry of its own.
type metrics struct {
	registry    *prometheus.Registry
	writes      *prometheus.CounterVec
	idemExpired prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fencelock",
			Subsystem: "store",
			Name:      "writes_total",
			Help: "Fenced writes (PUT, DELETE, fence POST) by result: accepted, " +
				"rejected_stale, rejected_missing_token, precondition_failed, not_found, and with " +
				"fencing disabled unfenced or unfenced_stale (a write fencing would have refused). " +
				"Not by domain, which callers choose without bound: refusals are logged with theirs.",
		}, []string{"result"}),
	}
	m.idemExpired = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencelock",
		Subsystem: "store",
		Name:      "idempotency_expired_total",
		Help:      "Idempotency-Key answers deleted by the background sweep after IdempotencyTTL.",
	})
	m.registry.MustRegister(m.writes, m.idemExpired,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe counts a decided write and logs refusals.
func (s *Server) observe(w write, result string) {
	s.metrics.writes.WithLabelValues(result).Inc()
	log := s.log.With("op", opName(w.op), "key", w.key, "domain", w.domain, "token", uint64(w.token))
	switch result {
	case resultAccepted, resultUnfenced:
		log.Debug("write accepted")
	case resultStale, resultMissingToken:
		log.Info("write refused by the fence", "result", result)
	case resultUnfencedStale:
		log.Warn("FENCING DISABLED: accepted a write that fencing would have refused", "result", result)
	default:
		log.Debug("write not applied", "result", result)
	}
}

func opName(op opKind) string {
	switch op {
	case opPut:
		return "put"
	case opDelete:
		return "delete"
	default:
		return "check"
	}
}
