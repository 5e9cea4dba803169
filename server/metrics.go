package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fencelock/fencelock/internal/buildinfo"
)

// The sources of a snapshot restore (the label of fencelock_snapshot_restores_total).
const (
	restoreLocal  = "local"  // the node's own latest snapshot, while it starts
	restoreLeader = "leader" // a snapshot the leader sent with InstallSnapshot
)

type metrics struct {
	reg          *prometheus.Registry
	grants       prometheus.Counter
	renewals     prometheus.Counter
	expiries     prometheus.Counter
	releases     prometheus.Counter
	rejected     *prometheus.CounterVec
	applySeconds prometheus.Histogram
	// restores counts snapshots restored into the FSM, by source: "local"
	// (this node's own snapshot, at start) or "leader" (InstallSnapshot).
	restores *prometheus.CounterVec
	// takenBack counts requests taken back because no call waited for
	// them; takeBackRetries, the proposals of it that failed.
	takenBack, takeBackRetries prometheus.Counter
	// appendEntries is the number of entries per log append (one sync each).
	appendEntries prometheus.Histogram
	// holdSeconds and waitSeconds: how long grants were held and how long
	// requests queued, by the entries' clock, as this node applied them.
	holdSeconds, waitSeconds prometheus.Histogram
	leaderChanges            prometheus.Counter
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
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_snapshot_restores_total",
			Help: `Snapshots restored into the state machine since this process started, by source: "local" (its own snapshot, at start) or "leader" (installed from the leader because this node was behind the leader's trailing logs).`},
			[]string{"source"}),
	}
	m.takenBack = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencelock_taken_back_total", Help: "Requests taken back (out of the queue, or their grant ended) because no call waited for them any more."})
	m.takeBackRetries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencelock_take_back_retries_total", Help: "Proposals taking back a request that failed and were retried."})
	m.appendEntries = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "fencelock_log_append_entries", Help: "Raft entries written by one append to this node's log; each append is one sync, so the count is the number of syncs.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 8)})
	m.holdSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "fencelock_lock_hold_seconds", Help: "How long grants were held, from grant to release, expiry or take-back, as this node applied them (every node applies every entry).",
		Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)})
	m.waitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "fencelock_lock_wait_seconds", Help: "How long each grant's request waited in the queue (0 when granted at once), as this node applied them.",
		Buckets: append([]float64{0}, prometheus.ExponentialBuckets(0.001, 4, 10)...)})
	m.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencelock_leader_changes_total", Help: "New Raft leaders this node observed (an election won by anyone, itself included)."})
	// Both series exist from the start, so a scrape before any restore reads 0.
	m.restores.WithLabelValues(restoreLocal)
	m.restores.WithLabelValues(restoreLeader)
	bi := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencelock_build_info",
		Help:        "Always 1; the labels say which build runs: the module version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "go_version": bi.GoVersion}})
	build.Set(1)
	m.reg.MustRegister(m.grants, m.renewals, m.expiries, m.releases, m.rejected, m.applySeconds, m.restores, m.takenBack, m.takeBackRetries, m.appendEntries,
		m.holdSeconds, m.waitSeconds, m.leaderChanges, build, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
