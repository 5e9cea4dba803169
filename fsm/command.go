package fsm

import (
	"encoding/json"
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

// Encode returns the command's log bytes.
func (c Command) Encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		// A Command holds only strings and integers; Marshal cannot fail.
		panic(fmt.Sprintf("fsm: encode command: %v", err))
	}
	return b
}

// DecodeCommand parses log bytes written by Encode.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return Command{}, fmt.Errorf("decode command: %w", err)
	}
	return c, nil
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
