package fsm

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
)

// DefaultDedupeWindow is how long the lease ids of expired grants are
// remembered, measured in command time (Command.Now), and the longest a
// request whose grant ended is (see EndedWindow).
const DefaultDedupeWindow = 10 * time.Minute

// EndedWindow is how long a request whose grant ended is remembered (or the
// dedupe window, if shorter), so that a late retry of it learns that its
// grant ended instead of being granted anew for nobody. It is well above
// how long a client retries a call (its RetryTimeout, 30 s, after the first
// failure) plus how long a node lets a proposal wait (ApplyTimeout, 10 s).
// A request that holds its lock or waits in its queue is found in the lock
// table, however long ago it came.
const EndedWindow = time.Minute

// Holder is the current grant of a lock.
type Holder struct {
	Token     fencelock.Token   `json:"token"`
	LeaseID   fencelock.LeaseID `json:"lease"`
	Holder    string            `json:"holder,omitempty"`
	TTL       int64             `json:"ttl"` // nanoseconds
	RequestID string            `json:"rid,omitempty"`
	GrantedAt int64             `json:"at"`              // Command.Now of the granting entry
	Owner     string            `json:"owner,omitempty"` // the identity that asked (Acquire.Owner)
	// Detached: the leader that made this grant found no caller waiting
	// for it (OpDetach). Whichever node leads takes it back unless a call
	// for its request comes first; that call's Acquire entry clears it.
	Detached bool `json:"detached,omitempty"`
}

// Waiter is a queued Acquire.
type Waiter struct {
	RequestID string            `json:"rid"`
	LeaseID   fencelock.LeaseID `json:"lease"`
	Holder    string            `json:"holder,omitempty"`
	TTL       int64             `json:"ttl"`
	QueuedAt  int64             `json:"at"`
	Owner     string            `json:"owner,omitempty"`
}

// Lock is one entry of the lock table, as the read methods return it and
// snapshots hold it: its waiters in FIFO order. A lock with no holder and no
// waiters has no entry.
type Lock struct {
	Name    fencelock.LockName `json:"name"`
	Holder  *Holder            `json:"holder,omitempty"`
	Waiters []Waiter           `json:"waiters,omitempty"`
	// QueueLen is how many waiters the lock has; the read methods list
	// the first MaxListedWaiters of them.
	QueueLen int `json:"-"`
}

// MaxListedWaiters is how many of a lock's waiters Get and List return.
const MaxListedWaiters = 100

// lock is the FSM's own entry of a lock: Lock, with its waiters in a queue
// indexed by request id.
type lock struct {
	Name   fencelock.LockName
	Holder *Holder
	queue  queue
}

// export returns a copy of l as a Lock, with its first limit waiters (all
// if limit < 0).
func (l *lock) export(limit int) Lock {
	c := Lock{Name: l.Name, Waiters: l.queue.waiters(limit), QueueLen: l.queue.len()}
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
	// Granted: h is the lock's new grant; waited is how long its request
	// queued (0 when granted at once), by the entries' clock.
	Granted(name fencelock.LockName, h Holder, waited time.Duration)
	// Ended: the grant of token ended after held, by the entries' clock.
	Ended(name fencelock.LockName, token fencelock.Token, held time.Duration)
	// Restored is called after Restore replaced the whole state (a snapshot
	// was installed): grants made in entries this replica never applied
	// are now in Holders.
	Restored()
}

// SigningKey is a key the cluster signs sequencers with: an Ed25519 seed
// (crypto/ed25519.NewKeyFromSeed), replicated like the lock table.
type SigningKey struct {
	ID    string `json:"id"`
	Seed  []byte `json:"seed"`
	Added int64  `json:"added"` // Command.Now of the entry that added it
	// Pending: published (resources may trust it) but not signing yet.
	Pending bool `json:"pending,omitempty"`
}

// Identity is who the cluster is: its id, the epoch its tokens are in, and
// its signing keys, oldest first: the newest that is not pending signs.
type Identity struct {
	ClusterID string
	Epoch     uint64
	Keys      []SigningKey
}

// MaxSigningKeys is how many keys that signed, or sign, a cluster keeps: a
// rotation drops the oldest beyond it (a pending key comes on top).
const MaxSigningKeys = 2

// seedSize is the length of an Ed25519 seed.
const seedSize = 32

// record is one remembered request whose grant ended, or expired lease id,
// as a snapshot holds it (a window holds them in memory).
type record struct {
	Key   string             `json:"key"`
	Name  fencelock.LockName `json:"name"`
	Token fencelock.Token    `json:"token,omitempty"`
	Now   int64              `json:"now"`
}

// FSM is the replicated lock table. Apply, Snapshot and Restore are called by
// Raft; the read methods may be called concurrently from any goroutine.
type FSM struct {
	window int64
	obs    Observer

	mu       sync.RWMutex
	locks    map[fencelock.LockName]*lock
	requests *window           // requestKey of a request whose grant ended -> its lock and token
	expired  *window           // lease id of an expired grant -> its lock and token
	members  map[string]string // node id -> API address
	applied  uint64
	lastNow  int64 // the largest Command.Now applied: command time never goes back
	identity Identity
	// waitersOf counts each owner's queued requests (derived from the
	// queues, rebuilt on Restore).
	waitersOf map[string]int
}

var _ raft.FSM = (*FSM)(nil)

// New returns an empty FSM that remembers expired leases for window (0
// means DefaultDedupeWindow), and requests whose grant ended for window or
// EndedWindow, whichever is shorter, and reports to obs (which may be nil).
func New(window time.Duration, obs Observer) *FSM {
	if window <= 0 {
		window = DefaultDedupeWindow
	}
	f := &FSM{window: int64(window), obs: obs}
	f.reset()
	return f
}

func (f *FSM) reset() {
	f.locks = make(map[fencelock.LockName]*lock)
	f.requests = newWindow()
	f.expired = newWindow()
	f.members = make(map[string]string)
	f.waitersOf = make(map[string]int)
}

type event struct {
	name    fencelock.LockName
	granted *Holder
	ended   fencelock.Token
	took    time.Duration // waited for a grant, held for an end
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
				f.obs.Granted(e.name, *e.granted, e.took)
			} else {
				f.obs.Ended(e.name, e.ended, e.took)
			}
		}
	}
	return res
}

func (f *FSM) apply(index uint64, cmd Command, events *[]event) Result {
	// Leaders' clocks differ; command time must not go back, or pruning
	// would depend on history that a snapshot does not keep.
	now := max(cmd.Now, f.lastNow)
	f.lastNow = now
	f.prune(now)
	switch p := cmd.Payload.(type) {
	case Acquire:
		return f.acquire(index, now, p, events)
	case Release:
		l := f.locks[p.Name]
		if l == nil || l.Holder == nil || l.Holder.LeaseID != p.LeaseID || l.Holder.Token != p.Token {
			return Result{Err: fmt.Errorf("release %q token %d: %w", p.Name, p.Token, fencelock.ErrNotHolder)}
		}
		if l.Holder.Owner != p.Owner {
			return Result{Err: fmt.Errorf("release %q token %d: the grant belongs to another caller: %w", p.Name, p.Token, fencelock.ErrPermissionDenied)}
		}
		f.end(index, now, l, false, events)
		return Result{}
	case Expire:
		l := f.locks[p.Name]
		if l == nil || l.Holder == nil || l.Holder.Token != p.Token {
			return Result{Err: fmt.Errorf("expire %q token %d: %w", p.Name, p.Token, fencelock.ErrNotHolder)}
		}
		f.end(index, now, l, true, events)
		return Result{}
	case CancelWait:
		return f.cancelWait(index, now, p, events)
	case Detach:
		return f.detach(p)
	case SetMember:
		f.members[p.NodeID] = p.APIAddr
		return Result{}
	case DropMember:
		delete(f.members, p.NodeID)
		return Result{}
	case SetIdentity:
		return f.applyKey(true, p.ClusterID, SigningKey{ID: p.KeyID, Seed: p.Seed, Added: now})
	case RotateKey:
		return f.applyKey(false, "", SigningKey{ID: p.KeyID, Seed: p.Seed, Added: now})
	}
	return Result{Err: fmt.Errorf("apply entry %d: no payload: %w", index, fencelock.ErrInvalidArgument)}
}

// detach marks the grant of p.Owner's request p.RequestID as reaching no
// caller.
func (f *FSM) detach(p Detach) Result {
	if l := f.locks[p.Name]; l != nil && l.Holder != nil && l.Holder.RequestID == p.RequestID && l.Holder.Owner == p.Owner {
		l.Holder.Detached = true
		return Result{}
	}
	return Result{Err: fmt.Errorf("detach %q request %s: %w", p.Name, p.RequestID, fencelock.ErrNotFound)}
}

// applyKey applies SetIdentity (first: a first key, and the cluster id
// unless it has one; ignored once there is a key: the first wins) and
// RotateKey (add a pending key, or make the pending one sign and drop the
// oldest).
func (f *FSM) applyKey(first bool, clusterID string, key SigningKey) Result {
	if len(key.Seed) != seedSize || key.ID == "" {
		return Result{Err: fmt.Errorf("signing key %q: want an id and a %d-byte seed: %w", key.ID, seedSize, fencelock.ErrInvalidArgument)}
	}
	id := &f.identity
	switch {
	case first && len(id.Keys) == 0:
		if id.ClusterID == "" {
			id.ClusterID = clusterID
		}
		id.Keys = []SigningKey{key}
	case first:
	case len(id.Keys) == 0:
		return Result{Err: fmt.Errorf("rotate key: the cluster has none yet: %w", fencelock.ErrInvalidArgument)}
	case id.Keys[len(id.Keys)-1].Pending:
		id.Keys[len(id.Keys)-1].Pending = false
		id.Keys = id.Keys[max(0, len(id.Keys)-MaxSigningKeys):]
	default:
		key.Pending = true
		id.Keys = append(id.Keys, key)
	}
	return Result{}
}

// requestKey is the key in the dedupe window of request rid of owner on
// lock name: the name, a zero byte (which no name holds), the owner's
// length and the owner, then the id. The same id on two locks, or of two
// owners, is two requests.
func requestKey(name fencelock.LockName, owner, rid string) string {
	var n [binary.MaxVarintLen64]byte
	var b strings.Builder // one allocation
	b.Grow(len(name) + 1 + len(n) + len(owner) + len(rid))
	b.WriteString(string(name))
	b.WriteByte(0)
	b.Write(n[:binary.PutUvarint(n[:], uint64(len(owner)))])
	b.WriteString(owner)
	b.WriteString(rid)
	return b.String()
}

// acquire answers a request it has seen with what seen says; otherwise it
// grants a free lock, queues a waiting request that has an id, or refuses
// with a LockHeldError.
func (f *FSM) acquire(index uint64, now int64, cmd Acquire, events *[]event) Result {
	if res, ok := f.seen(cmd); ok {
		return res
	}
	l := f.locks[cmd.Name]
	if l == nil {
		l = &lock{Name: cmd.Name}
		f.locks[cmd.Name] = l
	}
	if l.Holder == nil {
		tok, err := fencelock.MakeToken(f.identity.Epoch, index)
		if err != nil {
			f.dropIfIdle(l)
			return Result{Err: fmt.Errorf("acquire %q: %w", cmd.Name, err)}
		}
		h := &Holder{Token: tok, LeaseID: cmd.LeaseID, Holder: cmd.Holder,
			TTL: cmd.TTL, RequestID: cmd.RequestID, GrantedAt: now, Owner: cmd.Owner}
		l.Holder = h
		g := *h
		*events = append(*events, event{name: cmd.Name, granted: &g})
		return Result{Grant: &g}
	}
	if !cmd.Wait || cmd.RequestID == "" {
		return Result{Err: &fencelock.LockHeldError{Name: cmd.Name, Holder: l.Holder.Holder, Token: l.Holder.Token}}
	}
	if l.queue.push(Waiter{RequestID: cmd.RequestID, LeaseID: cmd.LeaseID,
		Holder: cmd.Holder, TTL: cmd.TTL, QueuedAt: now, Owner: cmd.Owner}) {
		f.waitersOf[cmd.Owner]++
	}
	return Result{Queued: true}
}

// seen answers an acquire whose request the lock table or the dedupe window
// knows: the request's own grant, its place in the queue, or that its grant
// ended.
func (f *FSM) seen(cmd Acquire) (Result, bool) {
	if cmd.RequestID == "" {
		return Result{}, false
	}
	if l := f.locks[cmd.Name]; l != nil {
		if l.Holder != nil && l.Holder.RequestID == cmd.RequestID {
			if err := cmd.ownedBy(l.Holder.Owner); err != nil {
				return Result{Err: err}, true
			}
			// A retry of a granted request: the same grant, never a second
			// one, and a caller is there for it.
			l.Holder.Detached = false
			h := *l.Holder
			return Result{Grant: &h}, true
		}
		if w, ok := l.queue.get(cmd.RequestID); ok {
			if err := cmd.ownedBy(w.Owner); err != nil {
				return Result{Err: err}, true
			}
			return Result{Queued: true}, true
		}
	}
	if tok, ok := f.requests.lookup(requestKey(cmd.Name, cmd.Owner, cmd.RequestID), string(cmd.Name)); ok {
		return Result{Err: fmt.Errorf("acquire %q: request %s was granted token %d, which has ended: %w",
			cmd.Name, cmd.RequestID, tok, fencelock.ErrNotHolder)}, true
	}
	return Result{}, false
}

// cancelWait takes request cmd.RequestID out of the queue of cmd.Name. If
// it is not queued, it ends a grant that request holds: it was granted
// after its waiter gave up. Either way the request is forgotten: asking again with its id is a new request. A cancel
// that finds nothing to cancel fails with ErrNotFound and keeps the record
// of an ended grant, so that a late retry learns its grant ended.
func (f *FSM) cancelWait(index uint64, now int64, cmd CancelWait, events *[]event) Result {
	l := f.locks[cmd.Name]
	if l == nil || cmd.RequestID == "" {
		return Result{Err: fmt.Errorf("cancel wait on %q: %w", cmd.Name, fencelock.ErrNotFound)}
	}
	w, queued := l.queue.get(cmd.RequestID)
	if queued && cmd.ownedBy(w.Owner) != nil {
		return Result{Err: cmd.ownedBy(w.Owner)}
	}
	if l.Holder != nil && l.Holder.RequestID == cmd.RequestID && cmd.ownedBy(l.Holder.Owner) != nil {
		return Result{Err: cmd.ownedBy(l.Holder.Owner)}
	}
	if queued && l.queue.remove(cmd.RequestID) {
		f.unwait(w.Owner)
		f.dropIfIdle(l)
		f.forgetRequest(cmd.Name, w.Owner, cmd.RequestID)
		return Result{}
	}
	if l.Holder != nil && l.Holder.RequestID == cmd.RequestID {
		// Granted after the waiter gave up: nobody will use this grant.
		owner := l.Holder.Owner
		f.end(index, now, l, false, events)
		f.forgetRequest(cmd.Name, owner, cmd.RequestID) // the record the end wrote
		return Result{}
	}
	return Result{Err: fmt.Errorf("cancel wait on %q: request %s: %w", cmd.Name, cmd.RequestID, fencelock.ErrNotFound)}
}

// unwait counts one waiter of owner gone.
func (f *FSM) unwait(owner string) {
	if f.waitersOf[owner]--; f.waitersOf[owner] <= 0 {
		delete(f.waitersOf, owner)
	}
}

// ownedBy refuses an Acquire about a request that another identity made:
// a request id answers only for its owner.
func (a Acquire) ownedBy(owner string) error { return checkOwner(a.Name, a.RequestID, a.Owner, owner) }

// ownedBy refuses a CancelWait of a request that another identity made.
func (c CancelWait) ownedBy(owner string) error {
	return checkOwner(c.Name, c.RequestID, c.Owner, owner)
}

func checkOwner(name fencelock.LockName, rid, caller, owner string) error {
	if caller == owner {
		return nil
	}
	return fmt.Errorf("request %s on %q belongs to another caller: %w", rid, name, fencelock.ErrPermissionDenied)
}

// forgetRequest forgets the record of owner's request rid on lock name, if any.
func (f *FSM) forgetRequest(name fencelock.LockName, owner, rid string) {
	key := requestKey(name, owner, rid)
	if _, ok := f.requests.lookup(key, string(name)); ok {
		f.requests.forget(key)
	}
}

// end ends l's current grant and grants the next waiter, in this entry.
func (f *FSM) end(index uint64, now int64, l *lock, expired bool, events *[]event) {
	old := l.Holder
	l.Holder = nil
	*events = append(*events, event{name: l.Name, ended: old.Token, took: time.Duration(max(now-old.GrantedAt, 0))})
	if old.RequestID != "" {
		// Remembered from its end on (see EndedWindow).
		f.requests.put(requestKey(l.Name, old.Owner, old.RequestID), string(l.Name), uint64(old.Token), now)
	}
	if expired {
		f.expired.put(string(old.LeaseID), string(l.Name), uint64(old.Token), now)
	}
	f.grantNext(index, now, l, events)
	f.dropIfIdle(l)
}

// grantNext grants l to its first waiter, if any, in entry index. Past the
// last token nobody is granted: the waiters stay queued.
func (f *FSM) grantNext(index uint64, now int64, l *lock, events *[]event) {
	tok, err := fencelock.MakeToken(f.identity.Epoch, index)
	if err != nil {
		return
	}
	w, ok := l.queue.pop()
	if !ok {
		return
	}
	f.unwait(w.Owner)
	h := &Holder{Token: tok, LeaseID: w.LeaseID, Holder: w.Holder,
		TTL: w.TTL, RequestID: w.RequestID, GrantedAt: now, Owner: w.Owner}
	l.Holder = h
	g := *h
	*events = append(*events, event{name: l.Name, granted: &g, took: time.Duration(max(now-w.QueuedAt, 0))})
}

// StartEpoch moves the state to token epoch epoch, above its own, for a
// restore. With a clusterID that is not "", the state becomes that
// cluster's, with key as its only signing key (the old cluster's keys must
// not sign for another). Raft never calls it: a restore writes the result
// as a new cluster's first snapshot.
func (f *FSM) StartEpoch(epoch uint64, clusterID string, key SigningKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch <= f.identity.Epoch || epoch > fencelock.MaxTokenEpoch {
		return fmt.Errorf("start epoch %d after epoch %d: %w", epoch, f.identity.Epoch, fencelock.ErrInvalidArgument)
	}
	f.identity.Epoch = epoch
	if clusterID != "" {
		f.identity.ClusterID, f.identity.Keys = clusterID, []SigningKey{key}
	}
	return nil
}

// Signer returns the cluster's id and the key that signs now; ok is false
// before the cluster has one.
func (f *FSM) Signer() (clusterID string, key SigningKey, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for i := len(f.identity.Keys) - 1; i >= 0; i-- {
		if k := f.identity.Keys[i]; !k.Pending {
			return f.identity.ClusterID, k, true
		}
	}
	return "", SigningKey{}, false
}

// Identity returns the cluster's identity: its id and signing keys ("" and
// none before the leader set them) and its token epoch.
func (f *FSM) Identity() Identity {
	f.mu.RLock()
	defer f.mu.RUnlock()
	id := f.identity
	id.Keys = slices.Clone(id.Keys)
	return id
}

func (f *FSM) dropIfIdle(l *lock) {
	if l.Holder == nil && l.queue.len() == 0 {
		delete(f.locks, l.Name)
	}
}

// prune forgets the requests whose grant ended more than EndedWindow (or
// the window) ago, and the expired leases older than the window.
func (f *FSM) prune(now int64) {
	f.requests.prune(now - min(f.window, int64(EndedWindow)))
	f.expired.prune(now - f.window)
}

// queued reports whether request rid waits in name's queue.
func (f *FSM) queued(name fencelock.LockName, rid string) bool {
	l := f.locks[name]
	return l != nil && l.queue.has(rid)
}

// QueuedRequest is one request waiting in a lock's queue.
type QueuedRequest struct {
	Name      fencelock.LockName
	RequestID string
	Owner     string
}

// QueuedRequests returns every request waiting in a queue.
func (f *FSM) QueuedRequests() []QueuedRequest {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []QueuedRequest
	for n, l := range f.locks {
		for _, s := range l.queue.slots {
			if !s.gap {
				out = append(out, QueuedRequest{Name: n, RequestID: s.w.RequestID, Owner: s.w.Owner})
			}
		}
	}
	return out
}

// Queued reports whether request rid waits in name's queue.
func (f *FSM) Queued(name fencelock.LockName, rid string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.queued(name, rid)
}

// Holds reports whether owner's request rid waits in name's queue or
// holds name.
func (f *FSM) Holds(name fencelock.LockName, rid, owner string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.heldBy(name, rid, owner) {
		return true
	}
	l := f.locks[name]
	if l == nil {
		return false
	}
	w, ok := l.queue.get(rid)
	return ok && w.Owner == owner
}

// HeldBy reports whether name is held by the grant of owner's request rid.
func (f *FSM) HeldBy(name fencelock.LockName, rid, owner string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.heldBy(name, rid, owner)
}

func (f *FSM) heldBy(name fencelock.LockName, rid, owner string) bool {
	l := f.locks[name]
	return rid != "" && l != nil && l.Holder != nil && l.Holder.RequestID == rid && l.Holder.Owner == owner
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
	return l.export(MaxListedWaiters), true
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
		out[i] = f.locks[fencelock.LockName(n)].export(MaxListedWaiters)
	}
	return out, more
}

// Waits reports how many waiters lock name has, whether request rid is
// one of them or holds the lock, and how many requests owner has queued
// on every lock, for the leader's limits.
func (f *FSM) Waits(name fencelock.LockName, rid, owner string) (queued int, known bool, byOwner int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if l := f.locks[name]; l != nil {
		queued = l.queue.len()
		known = l.queue.has(rid) || l.Holder != nil && l.Holder.RequestID == rid
	}
	return queued, known, f.waitersOf[owner]
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

// Counts returns how many locks are held and how many requests wait.
func (f *FSM) Counts() (held, waiting int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, l := range f.locks {
		if l.Holder != nil {
			held++
		}
		waiting += l.queue.len()
	}
	return held, waiting
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
