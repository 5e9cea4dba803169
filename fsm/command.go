package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock"
)

// Op names a command's payload in the log.
type Op uint8

// The payloads of the log, by their Op byte.
const (
	OpAcquire     Op = iota + 1 // Acquire
	OpRelease                   // Release
	OpExpire                    // Expire
	OpCancelWait                // CancelWait
	OpSetMember                 // SetMember
	OpDropMember                // DropMember
	OpSetIdentity               // SetIdentity
	OpRotateKey                 // RotateKey
	OpDetach                    // Detach
)

// formatVersion starts every entry and snapshot, so that a later release can change the format.
const formatVersion = 1

// Command is one entry of the replicated log: the proposer's wall clock in
// Unix nanoseconds (the FSM never reads the clock itself) and one
// operation's payload.
type Command struct {
	Now     int64
	Payload Payload
}

// Payload is one operation of the log: Acquire, Release, Expire,
// CancelWait, Detach, SetMember, DropMember, SetIdentity or RotateKey.
type Payload interface {
	op() Op
	put(b []byte) []byte // appends the fields
	get(d *decoder) Payload
}

// Acquire grants a free lock, queues a request that may wait, or refuses.
type Acquire struct {
	Name      fencelock.LockName
	RequestID string
	Holder    string // a label for humans
	LeaseID   fencelock.LeaseID
	TTL       int64 // nanoseconds
	Wait      bool  // the request may queue
	// Owner is the caller's identity ("" without authentication): a
	// request id answers only for its owner.
	Owner string
}

// Release ends the grant named by its lease id and token, if Owner (the
// caller's identity) made it.
type Release struct {
	Name    fencelock.LockName
	LeaseID fencelock.LeaseID
	Token   fencelock.Token
	Owner   string
}

// Expire ends the grant with Token, as the leader's lease timer decided.
type Expire struct {
	Name  fencelock.LockName
	Token fencelock.Token
}

// CancelWait takes a request out of its queue, or ends what it was
// granted. The node's take-backs send it as the request's owner.
type CancelWait struct {
	Name      fencelock.LockName
	RequestID string
	Owner     string // the caller's identity: it cancels only its own requests
}

// Detach records that the grant of Owner's request RequestID reached no
// caller; any leader takes it back after a grace. Only the node proposes
// it.
type Detach struct {
	Name      fencelock.LockName
	RequestID string
	Owner     string
}

// SetMember records a node's API address.
type SetMember struct{ NodeID, APIAddr string }

// DropMember forgets a removed node's API address.
type DropMember struct{ NodeID string }

// SetIdentity names the cluster and its first signing key, once.
type SetIdentity struct {
	ClusterID string
	KeyID     string
	Seed      []byte // the key's Ed25519 seed
}

// RotateKey adds a pending signing key, or makes the pending one sign.
type RotateKey struct {
	KeyID string
	Seed  []byte
}

func (Acquire) op() Op     { return OpAcquire }
func (Release) op() Op     { return OpRelease }
func (Expire) op() Op      { return OpExpire }
func (CancelWait) op() Op  { return OpCancelWait }
func (Detach) op() Op      { return OpDetach }
func (SetMember) op() Op   { return OpSetMember }
func (DropMember) op() Op  { return OpDropMember }
func (SetIdentity) op() Op { return OpSetIdentity }
func (RotateKey) op() Op   { return OpRotateKey }

func (p Acquire) put(b []byte) []byte {
	b = putStrings(b, string(p.Name), p.RequestID, p.Holder, string(p.LeaseID))
	b = binary.AppendVarint(b, p.TTL)
	return putStrings(append(b, flag(p.Wait)), p.Owner)
}

func (Acquire) get(d *decoder) Payload {
	p := Acquire{Name: fencelock.LockName(d.string()), RequestID: d.string(), Holder: d.string(), LeaseID: fencelock.LeaseID(d.string())}
	p.TTL, p.Wait, p.Owner = d.varint(), d.byte() == 1, d.string()
	return p
}

func (p Release) put(b []byte) []byte {
	b = binary.AppendUvarint(putStrings(b, string(p.Name), string(p.LeaseID)), uint64(p.Token))
	return putStrings(b, p.Owner)
}

func (Release) get(d *decoder) Payload {
	return Release{Name: fencelock.LockName(d.string()), LeaseID: fencelock.LeaseID(d.string()), Token: fencelock.Token(d.uvarint()), Owner: d.string()}
}

func (p Expire) put(b []byte) []byte {
	return binary.AppendUvarint(putStrings(b, string(p.Name)), uint64(p.Token))
}

func (Expire) get(d *decoder) Payload {
	return Expire{Name: fencelock.LockName(d.string()), Token: fencelock.Token(d.uvarint())}
}

func (p CancelWait) put(b []byte) []byte {
	return putStrings(b, string(p.Name), p.RequestID, p.Owner)
}

func (CancelWait) get(d *decoder) Payload {
	return CancelWait{Name: fencelock.LockName(d.string()), RequestID: d.string(), Owner: d.string()}
}

func (p Detach) put(b []byte) []byte { return putStrings(b, string(p.Name), p.RequestID, p.Owner) }

func (Detach) get(d *decoder) Payload {
	return Detach{Name: fencelock.LockName(d.string()), RequestID: d.string(), Owner: d.string()}
}

func (p SetMember) put(b []byte) []byte { return putStrings(b, p.NodeID, p.APIAddr) }

func (SetMember) get(d *decoder) Payload { return SetMember{NodeID: d.string(), APIAddr: d.string()} }

func (p DropMember) put(b []byte) []byte { return putStrings(b, p.NodeID) }

func (DropMember) get(d *decoder) Payload { return DropMember{NodeID: d.string()} }

func (p SetIdentity) put(b []byte) []byte {
	return putStrings(b, p.ClusterID, p.KeyID, string(p.Seed))
}

func (SetIdentity) get(d *decoder) Payload {
	return SetIdentity{ClusterID: d.string(), KeyID: d.string(), Seed: []byte(d.string())}
}

func (p RotateKey) put(b []byte) []byte { return putStrings(b, p.KeyID, string(p.Seed)) }

func (RotateKey) get(d *decoder) Payload {
	return RotateKey{KeyID: d.string(), Seed: []byte(d.string())}
}

// payloads decodes a payload by its Op byte.
var payloads = map[Op]Payload{
	OpAcquire: Acquire{}, OpRelease: Release{}, OpExpire: Expire{}, OpCancelWait: CancelWait{}, OpDetach: Detach{},
	OpSetMember: SetMember{}, OpDropMember: DropMember{}, OpSetIdentity: SetIdentity{}, OpRotateKey: RotateKey{},
}

func putStrings(b []byte, ss ...string) []byte {
	for _, s := range ss {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func flag(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// encodeCap is the room Encode starts with: an Acquire with its request
// id, lease id, holder label and owner fits, so it is not grown on the
// grant path (growing it cost 6 % of a busy node's CPU).
const encodeCap = 256

// Encode returns the command's log bytes: formatVersion, the payload's Op,
// Now, then the payload's fields, as varints, bytes and length-prefixed
// strings. A command without a payload encodes Op 0, which no replica
// applies.
func (c Command) Encode() []byte {
	b := make([]byte, 0, encodeCap)
	var op Op
	if c.Payload != nil {
		op = c.Payload.op()
	}
	b = binary.AppendVarint(append(b, formatVersion, byte(op)), c.Now)
	if c.Payload != nil {
		b = c.Payload.put(b)
	}
	return b
}

// DecodeCommand parses the bytes Encode wrote. It fails on another format
// version, an unknown Op, bytes missing or left over, and never panics.
func DecodeCommand(b []byte) (Command, error) {
	d := decoder{b: b, all: string(b)}
	if v := d.byte(); d.err == nil && v != formatVersion {
		return Command{}, fmt.Errorf("decode command: unknown format version %d", v)
	}
	op := Op(d.byte())
	c := Command{Now: d.varint()}
	if d.err != nil {
		return Command{}, fmt.Errorf("decode command: %w", d.err)
	}
	p, ok := payloads[op]
	if !ok {
		return Command{}, fmt.Errorf("decode command: unknown op %d", op)
	}
	c.Payload = p.get(&d)
	if d.err != nil {
		return Command{}, fmt.Errorf("decode command: %w", d.err)
	}
	if len(d.b) != 0 {
		return Command{}, fmt.Errorf("decode command: %d bytes after the end", len(d.b))
	}
	return c, nil
}

var errShort = errors.New("entry too short")

// decoder reads the binary encoding; after the first error every read
// returns zero and err stays set.
type decoder struct {
	b []byte
	// all is the whole encoding, copied once: the strings read are its
	// substrings, one allocation for every string of a command.
	all string
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errShort
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errShort
		return ""
	}
	at := len(d.all) - len(d.b)
	d.b = d.b[n:]
	return d.all[at : at+int(n)]
}

// Result is what applying one command returns to its proposer.
type Result struct {
	// Grant is set when the command's caller holds the lock (Acquire).
	Grant *Holder
	// Queued is set when an Acquire joined the wait queue.
	Queued bool
	// Err wraps a fencelock sentinel when the command was refused.
	Err error
}
