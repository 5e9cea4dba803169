// Package sequencer makes and verifies sequencers: a grant's proof, signed
// by the cluster that made it, which a resource checks without asking the
// lock service. It depends on the standard library and package fencelock
// only.
//
// A sequencer names the lock, its fencing token (and the token's epoch),
// the cluster, a hash of the lease id, when the grant was issued and when
// its lease ends, and the signing key; it is signed with the cluster's
// Ed25519 key. "fencelock keys" prints the public keys a Verifier trusts.
// A resource that accepts a write only with a valid sequencer for the
// write's domain cannot be fooled by an invented token: a forged or
// tampered sequencer fails the signature, an old one its lease end.
//
// The text form is "fls1." followed by the unpadded base64url encoding of
// the fields and the signature. A node signs the sequencers of grants made
// together under one signature (SignBatch): each then also carries its
// path to the batch's Merkle root, which the signature covers.
package sequencer

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
)

// Prefix starts every sequencer's text form.
const Prefix = "fls1."

// MaxLen is the longest text form Parse reads, in bytes.
const MaxLen = 2048

// signContext is signed before the fields, so that a sequencer's signature
// proves nothing else; batchContext before a batch's root.
const (
	signContext  = "fencelock sequencer v1\x00"
	batchContext = "fencelock sequencer batch v1\x00"
)

// MaxBatch is the most sequencers one signature covers; maxDepth is the
// longest Merkle path.
const (
	MaxBatch = 64
	maxDepth = 6
)

// The versions of the encoding: one sequencer under its own signature, or
// one of a batch, with its Merkle path.
const (
	versionSingle  = 1
	versionBatched = 2
)

// Sequencer is what a sequencer states.
type Sequencer struct {
	Lock      fencelock.LockName
	Token     fencelock.Token
	ClusterID string
	LeaseHash [16]byte  // the first 16 bytes of SHA-256 of the lease id
	Issued    time.Time // when the grant (or the renewal this sequencer came with) was made
	LeaseEnd  time.Time // when its lease ends unless renewed
	KeyID     string    // the signing key
}

// Epoch returns the token's epoch.
func (s Sequencer) Epoch() uint64 { return s.Token.Epoch() }

// LeaseHash returns the hash of a lease id that a sequencer carries.
func LeaseHash(id fencelock.LeaseID) [16]byte {
	sum := sha256.Sum256([]byte(id))
	var h [16]byte
	copy(h[:], sum[:16])
	return h
}

// fields encodes what s states: the version, then length-prefixed strings
// and varints.
func (s Sequencer) fields(version byte) []byte {
	b := []byte{version}
	for _, str := range []string{s.ClusterID, s.KeyID, string(s.Lock)} {
		b = binary.AppendUvarint(b, uint64(len(str)))
		b = append(b, str...)
	}
	b = binary.AppendUvarint(b, uint64(s.Token))
	b = append(b, s.LeaseHash[:]...)
	b = binary.AppendVarint(b, s.Issued.UnixMilli())
	b = binary.AppendVarint(b, s.LeaseEnd.UnixMilli())
	return b
}

// Sign returns s's text form, signed with key.
func Sign(s Sequencer, key ed25519.PrivateKey) string {
	f := s.fields(versionSingle)
	sig := ed25519.Sign(key, append([]byte(signContext), f...))
	return Prefix + base64.RawURLEncoding.EncodeToString(append(f, sig...))
}

// SignBatch returns the text forms of ss, signed with key: one signature
// per MaxBatch sequencers, over the Merkle root of their fields; each
// sequencer carries its path to the root. One alone is signed as by Sign.
func SignBatch(ss []Sequencer, key ed25519.PrivateKey) []string {
	var out []string
	for len(ss) > MaxBatch {
		out = append(out, SignBatch(ss[:MaxBatch], key)...)
		ss = ss[MaxBatch:]
	}
	if len(ss) <= 1 {
		for _, s := range ss {
			out = append(out, Sign(s, key))
		}
		return out
	}
	depth := bits.Len(uint(len(ss) - 1))
	level := make([][32]byte, 1<<depth) // the leaves, padded
	fields := make([][]byte, len(ss))
	for i := range level {
		level[i] = padHash
		if i < len(ss) {
			fields[i] = ss[i].fields(versionBatched)
			level[i] = leafHash(fields[i])
		}
	}
	levels := [][][32]byte{level}
	for len(level) > 1 {
		up := make([][32]byte, len(level)/2)
		for i := range up {
			up[i] = nodeHash(level[2*i], level[2*i+1])
		}
		levels, level = append(levels, up), up
	}
	sig := ed25519.Sign(key, append([]byte(batchContext), level[0][:]...))
	for i, f := range fields {
		b := append(f, byte(depth), byte(i))
		for d := range depth {
			sib := levels[d][(i>>d)^1]
			b = append(b, sib[:]...)
		}
		out = append(out, Prefix+base64.RawURLEncoding.EncodeToString(append(b, sig...)))
	}
	return out
}

// The Merkle tree's hashes: leaves, inner nodes and padding each have a
// prefix of their own, so that none can pass for another.
var padHash = sha256.Sum256([]byte{2})

func leafHash(fields []byte) [32]byte { return sha256.Sum256(append([]byte{0}, fields...)) }

func nodeHash(l, r [32]byte) [32]byte {
	return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

// The reasons a sequencer is refused. Each wraps fencelock.ErrInvalidSequencer.
var (
	ErrMalformed     = fmt.Errorf("malformed sequencer: %w", fencelock.ErrInvalidSequencer)
	ErrUnknownKey    = fmt.Errorf("sequencer signed with a key not trusted (rotated away, or another cluster's): %w", fencelock.ErrInvalidSequencer)
	ErrBadSignature  = fmt.Errorf("sequencer signature does not verify (forged or tampered): %w", fencelock.ErrInvalidSequencer)
	ErrExpired       = fmt.Errorf("sequencer's lease has ended: %w", fencelock.ErrInvalidSequencer)
	ErrWrongLock     = fmt.Errorf("sequencer is for another lock: %w", fencelock.ErrInvalidSequencer)
	ErrWrongCluster  = fmt.Errorf("sequencer is from a cluster not trusted: %w", fencelock.ErrInvalidSequencer)
	ErrTokenMismatch = fmt.Errorf("sequencer's token is not the write's: %w", fencelock.ErrInvalidSequencer)
)

// Parse decodes a sequencer's text form without verifying it, and returns
// what it states, its body (the fields, and a batched sequencer's Merkle
// path) and the signature.
func Parse(text string) (Sequencer, []byte, []byte, error) {
	s, body, sig, _, err := parse(text)
	return s, body, sig, err
}

// parse is Parse, and also returns the message the signature covers.
func parse(text string) (s Sequencer, body, sig, msg []byte, err error) {
	if len(text) > MaxLen || !strings.HasPrefix(text, Prefix) {
		return s, nil, nil, nil, fmt.Errorf("%w: want %q and at most %d bytes", ErrMalformed, Prefix, MaxLen)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(text[len(Prefix):])
	if err != nil || len(raw) < 1+ed25519.SignatureSize || raw[0] != versionSingle && raw[0] != versionBatched {
		return s, nil, nil, nil, fmt.Errorf("%w: not a version 1 or 2 encoding", ErrMalformed)
	}
	body, sig = raw[:len(raw)-ed25519.SignatureSize], raw[len(raw)-ed25519.SignatureSize:]
	d := reader{b: body[1:]}
	s.ClusterID, s.KeyID, s.Lock = d.str(), d.str(), fencelock.LockName(d.str())
	s.Token = fencelock.Token(d.uvarint())
	copy(s.LeaseHash[:], d.take(16))
	s.Issued, s.LeaseEnd = time.UnixMilli(d.varint()), time.UnixMilli(d.varint())
	msg = append([]byte(signContext), body...)
	if body[0] == versionBatched {
		msg = d.batchRoot(body[:len(body)-len(d.b)])
	}
	if d.bad || len(d.b) != 0 {
		return Sequencer{}, nil, nil, nil, fmt.Errorf("%w: bad fields", ErrMalformed)
	}
	return s, body, sig, msg, nil
}

// batchRoot reads a batched sequencer's Merkle path (depth, index, the
// siblings from the leaf up) and returns the signed message: the root of
// the batch that the path and the leaf's fields lead to.
func (r *reader) batchRoot(fields []byte) []byte {
	head := r.take(2)
	if r.bad || head[0] < 1 || int(head[0]) > maxDepth || int(head[1]) >= 1<<head[0] {
		r.bad = true
		return nil
	}
	depth, index := int(head[0]), int(head[1])
	h := leafHash(fields)
	for i := range depth {
		var sib [32]byte
		copy(sib[:], r.take(32))
		if index>>i&1 == 0 {
			h = nodeHash(h, sib)
		} else {
			h = nodeHash(sib, h)
		}
	}
	return append([]byte(batchContext), h[:]...)
}

// reader reads the fields; bad is set by a read past the end.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if r.bad || n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if r.bad || n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if n > MaxLen {
		r.bad = true
		return ""
	}
	return string(r.take(int(n)))
}

// Key is a public key a Verifier trusts: a cluster's signing key.
type Key struct {
	ClusterID string            `json:"cluster_id"`
	ID        string            `json:"id"`
	Public    ed25519.PublicKey `json:"public"` // base64 in JSON
}

// Verifier checks sequencers against the keys it trusts. The zero
// Verifier trusts nothing.
type Verifier struct {
	// Keys are the trusted keys ("fencelock keys --json" prints a
	// cluster's). A key trusts only sequencers of its cluster.
	Keys []Key
	// Skew is how long after its lease end a sequencer still passes, for
	// clocks that differ (0: none).
	Skew time.Duration
	// Now returns the time (time.Now if nil).
	Now func() time.Time
}

// Verify checks text: it must be well formed, signed by one of v's keys
// for the cluster it names, for lock (if lock is not empty), and its lease
// must not have ended. It returns what the sequencer states, or one of the
// errors above.
func (v *Verifier) Verify(text string, lock fencelock.LockName) (Sequencer, error) {
	s, _, sig, msg, err := parse(text)
	if err != nil {
		return Sequencer{}, err
	}
	key, err := v.key(s)
	if err != nil {
		return Sequencer{}, err
	}
	if !ed25519.Verify(key, msg, sig) {
		return Sequencer{}, ErrBadSignature
	}
	if lock != "" && s.Lock != lock {
		return Sequencer{}, fmt.Errorf("%w: it is for %q, the write's is %q", ErrWrongLock, s.Lock, lock)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if t := now(); t.After(s.LeaseEnd.Add(v.Skew)) {
		return Sequencer{}, fmt.Errorf("%w: at %s, %s ago", ErrExpired, s.LeaseEnd.UTC().Format(time.RFC3339Nano), t.Sub(s.LeaseEnd).Round(time.Millisecond))
	}
	return s, nil
}

func (v *Verifier) key(s Sequencer) (ed25519.PublicKey, error) {
	cluster := false
	for _, k := range v.Keys {
		if k.ClusterID != s.ClusterID {
			continue
		}
		cluster = true
		if k.ID == s.KeyID && len(k.Public) == ed25519.PublicKeySize {
			return k.Public, nil
		}
	}
	if !cluster {
		return nil, fmt.Errorf("%w: cluster %q", ErrWrongCluster, s.ClusterID)
	}
	return nil, fmt.Errorf("%w: key %q of cluster %q", ErrUnknownKey, s.KeyID, s.ClusterID)
}

// reasons names each refusal on the wire (an error body's "reason").
var reasons = []struct {
	name string
	err  error
}{
	{"malformed", ErrMalformed},
	{"unknown_key", ErrUnknownKey},
	{"bad_signature", ErrBadSignature},
	{"expired", ErrExpired},
	{"wrong_lock", ErrWrongLock},
	{"wrong_cluster", ErrWrongCluster},
	{"token_mismatch", ErrTokenMismatch},
}

// Reason returns the wire name of the refusal err wraps ("expired", ...),
// or "" if it wraps none.
func Reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return ""
}

// ForReason returns the refusal of a wire name, or nil.
func ForReason(name string) error {
	for _, r := range reasons {
		if r.name == name {
			return r.err
		}
	}
	return nil
}

// ReadKeys reads the keys a Verifier trusts from the JSON that "fencelock
// keys --json" prints: one object with a "keys" list per cluster, several
// of them one after another for several clusters.
func ReadKeys(r io.Reader) ([]Key, error) {
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	var out []Key
	for {
		var doc struct {
			Keys []Key `json:"keys"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read sequencer keys: %w: %w", fencelock.ErrInvalidArgument, err)
		}
		for _, k := range doc.Keys {
			if k.ClusterID == "" || k.ID == "" || len(k.Public) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("read sequencer keys: key %q of cluster %q is incomplete: %w", k.ID, k.ClusterID, fencelock.ErrInvalidArgument)
			}
		}
		out = append(out, doc.Keys...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("read sequencer keys: no keys: %w", fencelock.ErrInvalidArgument)
	}
	return out, nil
}

// VerifyWrite verifies text for a write to lock carrying token: Verify,
// and the sequencer's token must be the write's (ErrTokenMismatch).
func (v *Verifier) VerifyWrite(text string, lock fencelock.LockName, token fencelock.Token) (Sequencer, error) {
	s, err := v.Verify(text, lock)
	if err != nil {
		return s, err
	}
	if s.Token != token {
		return Sequencer{}, fmt.Errorf("%w: the sequencer's token is %d, the write's %d", ErrTokenMismatch, s.Token, token)
	}
	return s, nil
}
