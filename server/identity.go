package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/sequencer"
)

// signer is the private key that signs sequencers, derived once per key.
type signer struct {
	clusterID string
	keyID     string
	key       ed25519.PrivateKey
}

// signerCache holds the signer of the FSM's current key.
type signerCache struct{ p atomic.Pointer[signer] }

// get returns the signer of f's current key, or nil if f has none.
func (c *signerCache) get(f *fsm.FSM) *signer {
	cluster, k, ok := f.Signer()
	if !ok {
		return nil
	}
	if s := c.p.Load(); s != nil && s.keyID == k.ID && s.clusterID == cluster {
		return s
	}
	s := &signer{clusterID: cluster, keyID: k.ID, key: ed25519.NewKeyFromSeed(k.Seed)}
	c.p.Store(s)
	return s
}

// newKey draws a signing key: its id and seed.
func newKey() (string, []byte) {
	var id [8]byte
	seed := make([]byte, ed25519.SeedSize)
	_, _ = rand.Read(id[:])
	_, _ = rand.Read(seed)
	return hex.EncodeToString(id[:]), seed
}

// ensureIdentity gives a cluster that has no signing key its id (unless
// it has one) and a first key. The first leader does it, before it is
// ready, so that every grant it makes can carry a sequencer; a restored
// cluster keeps its own.
func (s *Server) ensureIdentity() {
	if id := s.fsm.Identity(); len(id.Keys) > 0 {
		return
	}
	var cid [16]byte
	_, _ = rand.Read(cid[:])
	keyID, seed := newKey()
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	cmd := fsm.SetIdentity{ClusterID: hex.EncodeToString(cid[:]), KeyID: keyID, Seed: seed}
	if _, err := s.Apply(ctx, cmd); err != nil {
		s.log.Warn("set the cluster's identity failed; grants carry no sequencer until the next election", "err", err)
		return
	}
	s.log.Info("cluster identity set", "cluster_id", s.fsm.Identity().ClusterID)
}

// RotateKey takes one step of a key rotation: without a pending key it
// adds one, published by Keys but not signing yet, so that resources can
// trust it first; with one, the pending key starts signing, the key that
// signed stays valid, and older ones are dropped.
func (s *Server) RotateKey(ctx context.Context) (KeySet, error) {
	if len(s.fsm.Identity().Keys) == 0 {
		return KeySet{}, fmt.Errorf("rotate key: the cluster has no signing key yet: %w", fencelock.ErrUnavailable)
	}
	keyID, seed := newKey()
	if _, err := s.Apply(ctx, fsm.RotateKey{KeyID: keyID, Seed: seed}); err != nil {
		return KeySet{}, err
	}
	return s.Keys(), nil
}

// KeySet is the cluster's identity as resources see it: its id, its token
// epoch and its public signing keys, oldest first.
type KeySet struct {
	ClusterID string
	Epoch     uint64
	Keys      []PublicKey
}

// PublicKey is one of the cluster's signing keys. Role is "signing" (the
// key that signs), "valid" (still trusted) or "pending" (published, not
// signing yet).
type PublicKey struct {
	ID     string
	Public ed25519.PublicKey
	Added  time.Time
	Role   string
}

// Keys returns the cluster's id, epoch and public keys as this node has
// applied them.
func (s *Server) Keys() KeySet {
	id := s.fsm.Identity()
	ks := KeySet{ClusterID: id.ClusterID, Epoch: id.Epoch}
	signing := ""
	for _, k := range id.Keys {
		if !k.Pending {
			signing = k.ID
		}
	}
	for _, k := range id.Keys {
		role := "valid"
		switch {
		case k.Pending:
			role = "pending"
		case k.ID == signing:
			role = "signing"
		}
		pub := ed25519.NewKeyFromSeed(k.Seed).Public().(ed25519.PublicKey)
		ks.Keys = append(ks.Keys, PublicKey{ID: k.ID, Public: pub, Added: time.Unix(0, k.Added), Role: role})
	}
	return ks
}

// ClusterID returns the cluster's id; "" before the cluster has a key.
func (s *Server) ClusterID() string {
	if sg := s.signers.get(s.fsm); sg != nil {
		return sg.clusterID
	}
	return ""
}

// Sequence returns the sequencer of a grant, and the cluster id; "" for
// both before the cluster has a key. It is signed in a batch with the
// sequencers asked for meanwhile (signQueue).
func (s *Server) Sequence(name fencelock.LockName, token fencelock.Token, lease fencelock.LeaseID, ttl time.Duration) (string, string) {
	sg := s.signers.get(s.fsm)
	if sg == nil {
		return "", ""
	}
	seq, _ := s.proof(sg, name, token, lease, ttl, time.Now())
	return s.toSign.sign(&signRequest{key: sg.key, text: make(chan string, 1), seq: seq}), sg.clusterID
}

// signRenewals signs a new sequencer for each renewal of rs that asks for
// one and whose lease the lease table still holds: one alone in a batch
// with the sequencers asked for meanwhile (signQueue), more under one
// signature per sequencer.MaxBatch of them.
func (s *Server) signRenewals(rs []Renewal) {
	sg := s.signers.get(s.fsm)
	if sg == nil {
		return
	}
	now := time.Now()
	var seqs []sequencer.Sequencer
	var of []int // the renewal of each of seqs
	for i, r := range rs {
		if !r.Sign || r.Err != nil {
			continue
		}
		if seq, ok := s.proof(sg, r.Name, r.Token, r.LeaseID, r.TTL, now); ok { // else the lease ended since
			seqs = append(seqs, seq)
			of = append(of, i)
		}
	}
	if len(seqs) == 1 {
		rs[of[0]].Sequencer = s.toSign.sign(&signRequest{key: sg.key, text: make(chan string, 1), seq: seqs[0]})
		return
	}
	for len(seqs) > 0 {
		n := min(len(seqs), sequencer.MaxBatch)
		for k, text := range sequencer.SignBatch(seqs[:n], sg.key) {
			rs[of[k]].Sequencer = text
		}
		seqs, of = seqs[n:], of[n:]
	}
}

// proof is the sequencer of a grant or renewal, issued now. Its lease end
// is the lease table's deadline for the grant (now + ttl if the table has
// none: ok is then false), never later than the lease really ends.
func (s *Server) proof(sg *signer, name fencelock.LockName, token fencelock.Token, lease fencelock.LeaseID, ttl time.Duration, now time.Time) (seq sequencer.Sequencer, ok bool) {
	end, ok := s.leases.expiry(name, token)
	if !ok || end.After(now.Add(ttl)) {
		end = now.Add(ttl)
	}
	return sequencer.Sequencer{Lock: name, Token: token, ClusterID: sg.clusterID, KeyID: sg.keyID,
		LeaseHash: sequencer.LeaseHash(lease), Issued: now, LeaseEnd: end}, ok
}

// Verifier returns a sequencer.Verifier that trusts the cluster's keys.
func (s *Server) Verifier() *sequencer.Verifier {
	ks := s.Keys()
	v := &sequencer.Verifier{}
	for _, k := range ks.Keys {
		v.Keys = append(v.Keys, sequencer.Key{ClusterID: ks.ClusterID, ID: k.ID, Public: k.Public})
	}
	return v
}

// CheckSequencer, on the leader after a barrier, verifies text's signature
// with the cluster's keys (its lease end aside: the question is the grant)
// and reports whether its grant is the lock's current one with a lease
// that has not run out, and the lock's current token.
func (s *Server) CheckSequencer(ctx context.Context, text string) (seq sequencer.Sequencer, current bool, token fencelock.Token, err error) {
	if err := s.linearize(ctx); err != nil {
		return seq, false, 0, fmt.Errorf("check sequencer: %w", err)
	}
	v := s.Verifier()
	v.Now = func() time.Time { return time.Time{} }
	if seq, err = v.Verify(text, ""); err != nil {
		return seq, false, 0, err
	}
	if err := s.allow(ctx, acl.Read, seq.Lock); err != nil {
		return seq, false, 0, fmt.Errorf("check sequencer: %w", err)
	}
	l, ok := s.fsm.Get(seq.Lock)
	if !ok || l.Holder == nil {
		return seq, false, 0, nil
	}
	h := l.Holder
	end, live := s.leases.expiry(seq.Lock, h.Token)
	current = h.Token == seq.Token && sequencer.LeaseHash(h.LeaseID) == seq.LeaseHash && live && end.After(time.Now())
	return seq, current, h.Token, nil
}
