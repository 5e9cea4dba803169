package fsm

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
)

// DefaultDedupeWindow is how long request ids and expired lease ids are
// remembered, measured in command time (Command.Now).
const DefaultDedupeWindow = 10 * time.Minute

// The rules are the versions of what the FSM answers. A change to an
// answer (how request ids are remembered, what a cancel may end) must take
// effect on every replica at the same entry, or replicas would diverge; so
// a replica applies the rules in force in the log, which an OpSetRules entry
// raises, and the leader proposes that entry only once every member's build
// implements the new rules (see the server's raiseRules).
//
//   - RulesV1, the rules of a log that never had an OpSetRules entry: a
//     request id is remembered by itself, whatever its lock; a cancel
//     forgets the request's record even when it cancels nothing; the
//     cancel of an unclaimed request (Command.Wait set) may end its grant.
//   - RulesV2: a request id is remembered per lock (the same id on two
//     locks is two requests); a cancel that cancels nothing keeps the
//     record, so that a late retry learns its grant has ended; the cancel
//     of an unclaimed request takes it out of the queue only, never ending
//     a grant; and entries may be written in the binary encoding.
//   - RulesV3: a request that holds its lock or waits in its queue is found
//     there, however long ago it came, and the dedupe window remembers only
//     the requests whose grant has ended, for EndedWindow after the end
//     (or the window, if shorter), no longer every request for the whole
//     window: the window holds what a minute of grants leaves, not ten.
const (
	RulesV1 uint64 = 1
	RulesV2 uint64 = 2
	RulesV3 uint64 = 3
	// MaxRules is the newest rules this build implements.
	MaxRules = RulesV3
)

// EndedWindow is how long, under RulesV3, a request whose grant ended is
// remembered, so that a late retry of it learns that its grant ended
// instead of being granted anew for nobody. It is well above how long a
// client retries a call (its RetryTimeout, 30 s, after the first failure)
// plus how long a node lets a proposal wait (ApplyTimeout, 10 s).
const EndedWindow = time.Minute

// Holder is the current grant of a lock.
type Holder struct {
	Token     fencelock.Token   `json:"token"`
	LeaseID   fencelock.LeaseID `json:"lease"`
	Holder    string            `json:"holder,omitempty"`
	TTL       int64             `json:"ttl"` // nanoseconds
	RequestID string            `json:"rid,omitempty"`
	GrantedAt int64             `json:"at"` // Command.Now of the granting entry
}

// Waiter is a queued Acquire.
type Waiter struct {
	RequestID string            `json:"rid"`
	LeaseID   fencelock.LeaseID `json:"lease"`
	Holder    string            `json:"holder,omitempty"`
	TTL       int64             `json:"ttl"`
	QueuedAt  int64             `json:"at"`
}

// Lock is one entry of the lock table. A lock with no holder and no waiters
// has no entry.
type Lock struct {
	Name    fencelock.LockName `json:"name"`
	Holder  *Holder            `json:"holder,omitempty"`
	Waiters []Waiter           `json:"waiters,omitempty"`
}

func (l *Lock) clone() Lock {
	c := Lock{Name: l.Name, Waiters: append([]Waiter(nil), l.Waiters...)}
	if l.Holder != nil {
		h := *l.Holder
		c.Holder = &h
	}
	return c
}

// Observer learns of grants and ended grants after each applied entry, on
// every replica, in log order. The server uses it to notify waiters and to
// arm and disarm lease timers. It must not block for long and must not call
// back into the FSM's Apply.
type Observer interface {
	Granted(name fencelock.LockName, h Holder)
	Ended(name fencelock.LockName, token fencelock.Token)
	// Restored is called after Restore replaced the whole state (a snapshot
	// was installed): grants made in entries this replica never applied
	// are now in Holders.
	Restored()
}

// record is one remembered request id or expired lease id, as a snapshot
// holds it (a window holds them in memory).
type record struct {
	Key   string             `json:"key"`
	Name  fencelock.LockName `json:"name"`
	Token fencelock.Token    `json:"token,omitempty"` // 0 while the request waits
	Now   int64              `json:"now"`
}

// FSM is the replicated lock table. Apply, Snapshot and Restore are called by
// Raft; the read methods may be called concurrently from any goroutine.
type FSM struct {
	window int64
	obs    Observer

	mu       sync.RWMutex
	locks    map[fencelock.LockName]*Lock
	requests *window           // request id -> its lock and token (0 while it waits; under RulesV3 only ended grants)
	expired  *window           // lease id of an expired grant -> its lock and token
	members  map[string]string // node id -> API address
	applied  uint64
	lastNow  int64         // the largest Command.Now applied: command time never goes back
	rules    atomic.Uint64 // the rules in force (RulesV1...); written under mu, read by Rules without it
}

var _ raft.FSM = (*FSM)(nil)

// New returns an empty FSM that remembers request ids for window (0 means
// DefaultDedupeWindow) and reports to obs (which may be nil).
func New(window time.Duration, obs Observer) *FSM {
	if window <= 0 {
		window = DefaultDedupeWindow
	}
	f := &FSM{window: int64(window), obs: obs}
	f.reset()
	return f
}

func (f *FSM) reset() {
	f.locks = make(map[fencelock.LockName]*Lock)
	f.requests = newWindow()
	f.expired = newWindow()
	f.members = make(map[string]string)
	f.rules.Store(RulesV1)
}

type event struct {
	name    fencelock.LockName
	granted *Holder
	ended   fencelock.Token
}

// Apply applies one committed log entry and returns a Result.
func (f *FSM) Apply(l *raft.Log) any {
	cmd, err := DecodeCommand(l.Data)
	if err != nil {
		// Every replica refuses it alike; it is applied all the same.
		f.mu.Lock()
		f.applied = l.Index
		f.mu.Unlock()
		return Result{Err: fmt.Errorf("apply entry %d: %v: %w", l.Index, err, fencelock.ErrInvalidArgument)}
	}
	f.mu.Lock()
	var events []event
	res := f.apply(l.Index, cmd, &events)
	f.applied = l.Index
	f.mu.Unlock()
	if f.obs != nil {
		for _, e := range events {
			if e.granted != nil {
				f.obs.Granted(e.name, *e.granted)
			} else {
				f.obs.Ended(e.name, e.ended)
			}
		}
	}
	return res
}

func (f *FSM) apply(index uint64, cmd Command, events *[]event) Result {
	// Leaders' clocks differ; command time must not go back, or pruning
	// would depend on history that a snapshot does not keep.
	cmd.Now = max(cmd.Now, f.lastNow)
	f.lastNow = cmd.Now
	f.prune(cmd.Now)
	switch cmd.Op {
	case OpAcquire:
		return f.acquire(index, cmd, events)
	case OpRelease:
		l := f.locks[cmd.Name]
		if l == nil || l.Holder == nil || l.Holder.LeaseID != cmd.LeaseID || l.Holder.Token != cmd.Token {
			return Result{Err: fmt.Errorf("release %q token %d: %w", cmd.Name, cmd.Token, fencelock.ErrNotHolder)}
		}
		f.end(index, cmd.Now, l, false, events)
		return Result{}
	case OpExpire:
		l := f.locks[cmd.Name]
		if l == nil || l.Holder == nil || l.Holder.Token != cmd.Token {
			return Result{Err: fmt.Errorf("expire %q token %d: %w", cmd.Name, cmd.Token, fencelock.ErrNotHolder)}
		}
		f.end(index, cmd.Now, l, true, events)
		return Result{}
	case OpCancelWait:
		return f.cancelWait(index, cmd, events)
	case OpSetMember:
		f.members[string(cmd.Name)] = cmd.Holder
		return Result{}
	case OpDropMember:
		delete(f.members, string(cmd.Name))
		return Result{}
	case OpSetRules:
		if v := uint64(cmd.Token); v > MaxRules {
			// Only a leader whose every member implements v proposes it:
			// this replica's build is older than its configuration says.
			return Result{Err: fmt.Errorf("apply entry %d: rules %d, newer than this build's %d: %w", index, v, MaxRules, fencelock.ErrInvalidArgument)}
		} else if v > f.rules.Load() {
			if v >= RulesV2 && f.rules.Load() < RulesV2 {
				f.forgetAmbiguous()
			}
			if v >= RulesV3 && f.rules.Load() < RulesV3 {
				f.restartEnded(cmd.Now)
			}
			f.rules.Store(v) // never lowered
		}
		return Result{}
	default:
		return Result{Err: fmt.Errorf("apply entry %d: unknown op %d: %w", index, cmd.Op, fencelock.ErrInvalidArgument)}
	}
}

// requestKey is request rid's key in the dedupe window under the rules in
// force: under RulesV2 the lock's name, a zero byte (which no name holds)
// and the id.
func (f *FSM) requestKey(name fencelock.LockName, rid string) string {
	if f.rules.Load() < RulesV2 {
		return rid
	}
	return string(name) + "\x00" + rid
}

// findRequest returns request rid's record on lock name: its key and token
// (0 while it waits). Under RulesV2 it also finds a record written before
// the switch, under the id alone.
func (f *FSM) findRequest(name fencelock.LockName, rid string) (key string, token uint64, ok bool) {
	if rid == "" {
		return "", 0, false
	}
	key = f.requestKey(name, rid)
	if token, ok = f.requests.lookup(key, string(name)); ok || key == rid {
		return key, token, ok
	}
	token, ok = f.requests.lookup(rid, string(name))
	return rid, token, ok
}

// forgetAmbiguous forgets, as the log switches to RulesV2, the records
// whose key (a request id, under RulesV1) reads as a RulesV2 key of their
// own lock: an id "A\x00r" on lock A, which releases before RulesV2
// accepted, would otherwise be taken for request "r" on A. A retry of such a
// request is a new request.
func (f *FSM) forgetAmbiguous() {
	var keys []string
	f.requests.view().each(func(key, name []byte, _ uint64, _ int64) bool {
		if len(key) > len(name) && key[len(name)] == 0 && string(key[:len(name)]) == string(name) {
			keys = append(keys, string(key))
		}
		return true
	})
	for _, k := range keys {
		f.requests.forget(k)
	}
}

// restartEnded records anew at now, as the log switches to RulesV3, the
// requests whose grant has ended: their records carry the time of the
// grant, and RulesV3's shorter cut would forget at once those granted more
// than EndedWindow ago, however recently they ended.
func (f *FSM) restartEnded(now int64) {
	type rec struct {
		key, name string
		token     uint64
	}
	var ended []rec
	f.requests.view().each(func(key, name []byte, token uint64, _ int64) bool {
		if token == 0 {
			return true
		}
		if l := f.locks[fencelock.LockName(name)]; l != nil && l.Holder != nil && uint64(l.Holder.Token) == token {
			return true // still held: the lock table has it
		}
		ended = append(ended, rec{string(key), string(name), token})
		return true
	})
	for _, r := range ended {
		f.requests.put(r.key, r.name, r.token, now)
	}
}

// ridOf returns the request id of a dedupe window key (see requestKey).
func ridOf(key, name string) string {
	if len(key) > len(name) && key[len(name)] == 0 && key[:len(name)] == name {
		return key[len(name)+1:]
	}
	return key
}

func (f *FSM) acquire(index uint64, cmd Command, events *[]event) Result {
	if f.rules.Load() >= RulesV3 {
		if res, ok := f.seen(cmd); ok {
			return res
		}
	} else if _, tok, ok := f.findRequest(cmd.Name, cmd.RequestID); ok {
		l := f.locks[cmd.Name]
		if tok != 0 {
			// A retry of a granted request: the same grant, never a second one.
			if l != nil && l.Holder != nil && l.Holder.Token == fencelock.Token(tok) {
				h := *l.Holder
				return Result{Grant: &h}
			}
			return Result{Err: fmt.Errorf("acquire %q: request %s was granted token %d, which has ended: %w",
				cmd.Name, cmd.RequestID, tok, fencelock.ErrNotHolder)}
		}
		if l != nil {
			for _, w := range l.Waiters {
				if w.RequestID == cmd.RequestID {
					return Result{Queued: true}
				}
			}
		}
	}
	l := f.locks[cmd.Name]
	if l == nil {
		l = &Lock{Name: cmd.Name}
		f.locks[cmd.Name] = l
	}
	if l.Holder == nil {
		h := &Holder{Token: fencelock.Token(index), LeaseID: cmd.LeaseID, Holder: cmd.Holder,
			TTL: cmd.TTL, RequestID: cmd.RequestID, GrantedAt: cmd.Now}
		l.Holder = h
		f.remember(cmd.RequestID, cmd.Name, h.Token, cmd.Now)
		g := *h
		*events = append(*events, event{name: cmd.Name, granted: &g})
		return Result{Grant: &g}
	}
	if !cmd.Wait || cmd.RequestID == "" {
		return Result{Err: &fencelock.LockHeldError{Name: cmd.Name, Holder: l.Holder.Holder, Token: l.Holder.Token}}
	}
	l.Waiters = append(l.Waiters, Waiter{RequestID: cmd.RequestID, LeaseID: cmd.LeaseID,
		Holder: cmd.Holder, TTL: cmd.TTL, QueuedAt: cmd.Now})
	f.remember(cmd.RequestID, cmd.Name, 0, cmd.Now)
	return Result{Queued: true}
}

// seen answers, under RulesV3, an acquire whose request the lock table or
// the dedupe window knows: the request's own grant, its place in the queue,
// or that its grant ended.
func (f *FSM) seen(cmd Command) (Result, bool) {
	if cmd.RequestID == "" {
		return Result{}, false
	}
	if l := f.locks[cmd.Name]; l != nil {
		if l.Holder != nil && l.Holder.RequestID == cmd.RequestID {
			// A retry of a granted request: the same grant, never a second one.
			h := *l.Holder
			return Result{Grant: &h}, true
		}
		for _, w := range l.Waiters {
			if w.RequestID == cmd.RequestID {
				return Result{Queued: true}, true
			}
		}
	}
	if _, tok, ok := f.findRequest(cmd.Name, cmd.RequestID); ok && tok != 0 {
		return Result{Err: fmt.Errorf("acquire %q: request %s was granted token %d, which has ended: %w",
			cmd.Name, cmd.RequestID, tok, fencelock.ErrNotHolder)}, true
	}
	return Result{}, false
}

func (f *FSM) cancelWait(index uint64, cmd Command, events *[]event) Result {
	l := f.locks[cmd.Name]
	if l == nil || cmd.RequestID == "" {
		return Result{Err: fmt.Errorf("cancel wait on %q: %w", cmd.Name, fencelock.ErrNotFound)}
	}
	forget := func() {
		// Looked up now: under RulesV3 the end of a grant records it.
		if key, _, ok := f.findRequest(cmd.Name, cmd.RequestID); ok {
			f.requests.forget(key)
		}
	}
	if f.rules.Load() < RulesV2 {
		forget() // whatever follows
	}
	for i, w := range l.Waiters {
		if w.RequestID == cmd.RequestID {
			l.Waiters = append(l.Waiters[:i], l.Waiters[i+1:]...)
			f.dropIfIdle(l)
			forget()
			return Result{}
		}
	}
	if l.Holder != nil && l.Holder.RequestID == cmd.RequestID && (!cmd.Wait || f.rules.Load() < RulesV2) {
		// Granted after the waiter gave up: nobody will use this grant.
		f.end(index, cmd.Now, l, false, events)
		forget()
		return Result{}
	}
	// Under RulesV2 the record stays: a late retry of a request whose
	// grant ended learns so, instead of being granted anew for nobody.
	return Result{Err: fmt.Errorf("cancel wait on %q: request %s: %w", cmd.Name, cmd.RequestID, fencelock.ErrNotFound)}
}

// end ends l's current grant and grants the next waiter, in this entry.
func (f *FSM) end(index uint64, now int64, l *Lock, expired bool, events *[]event) {
	old := l.Holder
	l.Holder = nil
	*events = append(*events, event{name: l.Name, ended: old.Token})
	if old.RequestID != "" && f.rules.Load() >= RulesV3 {
		// Remembered from its end on (see EndedWindow).
		f.putRequest(old.RequestID, l.Name, old.Token, now)
	}
	if expired {
		f.expired.put(string(old.LeaseID), string(l.Name), uint64(old.Token), now)
	}
	if len(l.Waiters) > 0 {
		w := l.Waiters[0]
		l.Waiters = l.Waiters[1:]
		h := &Holder{Token: fencelock.Token(index), LeaseID: w.LeaseID, Holder: w.Holder,
			TTL: w.TTL, RequestID: w.RequestID, GrantedAt: now}
		l.Holder = h
		// A fresh record: the retry window of a grant starts at the grant.
		f.remember(w.RequestID, l.Name, h.Token, now)
		g := *h
		*events = append(*events, event{name: l.Name, granted: &g})
	}
	f.dropIfIdle(l)
}

func (f *FSM) dropIfIdle(l *Lock) {
	if l.Holder == nil && len(l.Waiters) == 0 {
		delete(f.locks, l.Name)
	}
}

func (f *FSM) remember(rid string, name fencelock.LockName, tok fencelock.Token, now int64) {
	if rid == "" || f.rules.Load() >= RulesV3 {
		return // under RulesV3 the lock table has it; end records it
	}
	f.putRequest(rid, name, tok, now)
}

// putRequest records request rid on lock name under the rules in force.
func (f *FSM) putRequest(rid string, name fencelock.LockName, tok fencelock.Token, now int64) {
	key := f.requestKey(name, rid)
	if key != rid {
		// A record of this request from before RulesV2 gives way.
		if _, ok := f.requests.lookup(rid, string(name)); ok {
			f.requests.forget(rid)
		}
	}
	f.requests.put(key, string(name), uint64(tok), now)
}

// prune forgets request ids and expired leases older than the window.
func (f *FSM) prune(now int64) {
	cut := now - f.window
	if f.rules.Load() >= RulesV3 {
		// Only ended grants; the lock table holds the rest.
		f.requests.prune(now-min(f.window, int64(EndedWindow)), now, nil)
		f.expired.prune(cut, now, nil)
		return
	}
	f.requests.prune(cut, now, func(key, name string, token uint64) bool {
		// Still waiting: its retries must keep finding it.
		rid := key
		if f.rules.Load() >= RulesV2 {
			rid = ridOf(key, name)
		}
		return token == 0 && f.queued(fencelock.LockName(name), rid)
	})
	f.expired.prune(cut, now, nil)
}

// queued reports whether request rid waits in name's queue.
func (f *FSM) queued(name fencelock.LockName, rid string) bool {
	if l := f.locks[name]; l != nil {
		for _, w := range l.Waiters {
			if w.RequestID == rid {
				return true
			}
		}
	}
	return false
}

// QueuedRequest is one request waiting in a lock's queue.
type QueuedRequest struct {
	Name      fencelock.LockName
	RequestID string
}

// QueuedRequests returns every request waiting in a queue.
func (f *FSM) QueuedRequests() []QueuedRequest {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []QueuedRequest
	for n, l := range f.locks {
		for _, w := range l.Waiters {
			out = append(out, QueuedRequest{Name: n, RequestID: w.RequestID})
		}
	}
	return out
}

// Queued reports whether request rid waits in name's queue.
func (f *FSM) Queued(name fencelock.LockName, rid string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return rid != "" && f.queued(name, rid)
}

// HeldByOther reports whether name is held by a grant of a request other
// than rid: an acquire of rid would then queue (or find itself queued).
func (f *FSM) HeldByOther(name fencelock.LockName, rid string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.locks[name]
	return l != nil && l.Holder != nil && (rid == "" || l.Holder.RequestID != rid)
}

// Get returns a copy of the named lock's entry.
func (f *FSM) Get(name fencelock.LockName) (Lock, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.locks[name]
	if l == nil {
		return Lock{}, false
	}
	return l.clone(), true
}

// Expired reports whether the lease id's grant ended by expiry within the
// dedupe window.
func (f *FSM) Expired(id fencelock.LeaseID) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, _, ok := f.expired.find(string(id))
	return ok
}

// List returns up to limit locks whose names start with prefix and sort after
// after, in name order, and whether more follow.
func (f *FSM) List(prefix, after string, limit int) ([]Lock, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	names := make([]string, 0, len(f.locks))
	for n := range f.locks {
		if s := string(n); strings.HasPrefix(s, prefix) && s > after {
			names = append(names, s)
		}
	}
	sort.Strings(names)
	more := len(names) > limit
	if more {
		names = names[:limit]
	}
	out := make([]Lock, len(names))
	for i, n := range names {
		out[i] = f.locks[fencelock.LockName(n)].clone()
	}
	return out, more
}

// Holders returns every lock's current grant, for re-arming lease timers.
func (f *FSM) Holders() map[fencelock.LockName]Holder {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[fencelock.LockName]Holder, len(f.locks))
	for n, l := range f.locks {
		if l.Holder != nil {
			out[n] = *l.Holder
		}
	}
	return out
}

// MemberAPI returns the API address recorded for a node id.
func (f *FSM) MemberAPI(id string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a, ok := f.members[id]
	return a, ok
}

// MemberAPIs returns every recorded node id -> API address.
func (f *FSM) MemberAPIs() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]string, len(f.members))
	for k, v := range f.members {
		out[k] = v
	}
	return out
}

// Rules returns the rules in force (RulesV1...).
func (f *FSM) Rules() uint64 { return f.rules.Load() }

// LastNow returns the command time (Command.Now, in Unix nanoseconds) of
// the last entry applied: command time never goes back.
func (f *FSM) LastNow() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.lastNow
}

// AppliedIndex returns the index of the last applied entry.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}
