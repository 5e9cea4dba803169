package fence

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock"
)

// Refusals counts the writes this process's fences refused, by adapter
// (postgres, redis, memory) and reason (stale, missing_token,
// invalid_token): a rise in stale refusals means holders that outlived
// their lease. Both labels have a few values only. Nothing registers it:
// add it to your registry to export it,
//
//	prometheus.MustRegister(fence.Refusals)
var Refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fencelock_fence_refusals_total",
	Help: "Writes refused by a fence of this process, by adapter and reason (stale, missing_token, invalid_token).",
}, []string{"adapter", "reason"})

// Refused counts err in Refusals for adapter if it is a refusal of the
// rule, and returns err unchanged, so an adapter can write
// return fence.Refused("redis", err).
func Refused(adapter string, err error) error {
	var reason string
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencelock.ErrStaleToken):
		reason = "stale"
	case errors.Is(err, fencelock.ErrMissingToken):
		reason = "missing_token"
	case errors.Is(err, fencelock.ErrInvalidToken):
		reason = "invalid_token"
	default:
		return err
	}
	Refusals.WithLabelValues(adapter, reason).Inc()
	return err
}
