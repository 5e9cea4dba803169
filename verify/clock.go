package verify

import (
	"time"

	"golang.org/x/sys/unix"
)

// monoNow reads CLOCK_MONOTONIC. Every process of a run shares the machine
// and so this one clock: the harness stamps its history with it and the
// workers report lease ends and grants with it, so times taken in
// different processes compare directly.
func monoNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("verify: read CLOCK_MONOTONIC: " + err.Error()) // Linux and macOS always have it
	}
	return time.Duration(ts.Nano())
}

// monoAt is the CLOCK_MONOTONIC reading of instant t, a time.Time with a
// monotonic reading (from time.Now, in this process).
func monoAt(t time.Time) time.Duration { return monoNow() + time.Until(t) }
