package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type metrics struct {
	reg          *prometheus.Registry
	grants       prometheus.Counter
	renewals     prometheus.Counter
	expiries     prometheus.Counter
	releases     prometheus.Counter
	rejected     *prometheus.CounterVec
	applySeconds prometheus.Histogram
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		grants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_grants_total", Help: "Grants applied on this node, including waiters granted on release or expiry."}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_renewals_total", Help: "Successful lease renewals (no disk write each)."}),
		expiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_expiries_total", Help: "Leases expired by this node as leader."}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_releases_total", Help: "Successful releases."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_rejected_requests_total", Help: "Requests refused, by method and error code."},
			[]string{"method", "code"}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencelock_raft_apply_seconds", Help: "Time from proposal to applied result.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
	}
	m.reg.MustRegister(m.grants, m.renewals, m.expiries, m.releases, m.rejected, m.applySeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
