package fsm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock"
)

// Op names a command.
type Op uint8

// The commands the FSM applies.
const (
	OpAcquire    Op = iota + 1 // grant, queue, or refuse
	OpRelease                  // end a grant named by lease id and token
	OpExpire                   // end a grant named by token, decided by the leader's timer
	OpCancelWait               // remove a waiter that gave up, or release what it was granted
	OpSetMember                // record a node's API address (Name: node id, Holder: address)
	OpDropMember               // forget a removed node's API address (Name: node id)
	OpSetRules                 // switch every replica to the rules numbered Token (see Rules)
)

// Command is one entry of the replicated log. The proposer fills Now with its
// wall clock in Unix nanoseconds; the FSM never reads the clock itself.
type Command struct {
	Op        Op                 `json:"op"`
	Now       int64              `json:"now"`
	Name      fencelock.LockName `json:"name"`
	RequestID string             `json:"rid,omitempty"`
	Holder    string             `json:"holder,omitempty"`
	LeaseID   fencelock.LeaseID  `json:"lease,omitempty"`
	Token     fencelock.Token    `json:"token,omitempty"`
	TTL       int64              `json:"ttl,omitempty"` // nanoseconds
	Wait      bool               `json:"wait,omitempty"`
}

// commandV1 starts a command in the binary encoding. Entries written as
// JSON objects start with '{'. This version writes JSON and reads both: a
// node of the previous release decodes only JSON, so writing binary must
// wait for a release whose every peer reads it (a rolling upgrade runs old
// and new nodes in one cluster).
const commandV1 = 1

// Encode returns the command's log bytes (JSON; see commandV1).
func (c Command) Encode() []byte {
	if b, ok := appendJSON(make([]byte, 0, 160+len(c.Name)+len(c.RequestID)+len(c.Holder)+len(c.LeaseID)), c); ok {
		return b
	}
	b, err := json.Marshal(c)
	if err != nil {
		// A Command holds only strings and integers; Marshal cannot fail.
		panic(fmt.Sprintf("fsm: encode command: %v", err))
	}
	return b
}

// EncodeBinary returns the command in the binary encoding: a version byte,
// then op, now, name, request id, holder, lease id, token, TTL and wait, as
// varints and length-prefixed strings. DecodeCommand reads it; Encode does
// not write it yet (see commandV1).
func (c Command) EncodeBinary() []byte {
	b := make([]byte, 0, 32+len(c.Name)+len(c.RequestID)+len(c.Holder)+len(c.LeaseID))
	b = append(b, commandV1, byte(c.Op))
	b = binary.AppendVarint(b, c.Now)
	for _, s := range []string{string(c.Name), c.RequestID, c.Holder, string(c.LeaseID)} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(c.Token))
	b = binary.AppendVarint(b, c.TTL)
	if c.Wait {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return b
}

// DecodeCommand parses log bytes in either encoding (JSON or binary).
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if len(b) > 0 && b[0] == '{' {
		if c, ok := parseJSON(b); ok {
			return c, nil
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return Command{}, fmt.Errorf("decode command: %w", err)
		}
		return c, nil
	}
	d := decoder{b: b}
	if v := d.byte(); v != commandV1 {
		return Command{}, fmt.Errorf("decode command: unknown encoding version %d", v)
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
