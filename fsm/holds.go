package fsm

import "github.com/fencelock/fencelock"

// Holds reports whether request rid waits in name's queue or holds name.
func (f *FSM) Holds(name fencelock.LockName, rid string) bool {
	if rid == "" {
		return false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if l := f.locks[name]; l != nil && l.Holder != nil && l.Holder.RequestID == rid {
		return true
	}
	return f.queued(name, rid)
}
