package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock"
)

// Op names a command.
type Op uint8

// The commands the FSM applies.
const (
	OpAcquire     Op = iota + 1 // grant, queue, or refuse
	OpRelease                   // end a grant named by lease id and token
	OpExpire                    // end a grant named by token, decided by the leader's timer
	OpCancelWait                // remove a waiter that gave up, or release what it was granted
	OpSetMember                 // record a node's API address (Name: node id, Holder: address)
	OpDropMember                // forget a removed node's API address (Name: node id)
	OpSetIdentity               // name the cluster and its first signing key, once (RequestID: cluster id, Holder: key id, LeaseID: the key's seed)
	OpRotateKey                 // add a signing key, keeping the previous one (Holder: key id, LeaseID: the key's seed)
	OpDetach                    // mark the grant of request RequestID as reaching no caller (ByNode)
)

// formatVersion starts every entry and snapshot, so that a later release can change the format.
const formatVersion = 1

// Command is one entry of the replicated log. The proposer fills Now with its
// wall clock in Unix nanoseconds; the FSM never reads the clock itself.
type Command struct {
	Op        Op
	Now       int64
	Name      fencelock.LockName
	RequestID string
	Holder    string
	LeaseID   fencelock.LeaseID
	Token     fencelock.Token
	TTL       int64 // nanoseconds
	Wait      bool  // an Acquire that may queue
	// Owner is the identity of the caller of an Acquire or CancelWait (""
	// without authentication): a request id answers, and cancels, only for
	// its owner.
	Owner string
	// ByNode marks the node's own commands (a take-back's CancelWait),
	// which may touch any owner's request.
	ByNode bool
}

// Encode returns the command's log bytes: formatVersion, then op, now,
// name, request id, holder, lease id, token, TTL, wait, owner and by-node,
// as varints, bytes and length-prefixed strings.
func (c Command) Encode() []byte {
	b := make([]byte, 0, 32+len(c.Name)+len(c.RequestID)+len(c.Holder)+len(c.LeaseID))
	b = append(b, formatVersion, byte(c.Op))
	b = binary.AppendVarint(b, c.Now)
	for _, s := range []string{string(c.Name), c.RequestID, c.Holder, string(c.LeaseID)} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(c.Token))
	b = binary.AppendVarint(b, c.TTL)
	b = append(b, flag(c.Wait))
	b = binary.AppendUvarint(b, uint64(len(c.Owner)))
	b = append(b, c.Owner...)
	return append(b, flag(c.ByNode))
}

func flag(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// DecodeCommand parses the bytes Encode wrote. It fails on another format
// version, on bytes missing or left over, and never panics.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != formatVersion {
		return Command{}, fmt.Errorf("decode command: unknown format version %d", v)
	}
	c.Op = Op(d.byte())
	c.Now = d.varint()
	c.Name = fencelock.LockName(d.string())
	c.RequestID = d.string()
	c.Holder = d.string()
	c.LeaseID = fencelock.LeaseID(d.string())
	c.Token = fencelock.Token(d.uvarint())
	c.TTL = d.varint()
	c.Wait = d.byte() == 1
	c.Owner = d.string()
	c.ByNode = d.byte() == 1
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
	b   []byte
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
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
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
