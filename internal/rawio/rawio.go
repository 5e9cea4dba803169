// Package rawio makes the system calls of the hot path without telling Go's
// scheduler: the reads and writes of the API's TCP connections, on the node
// and in the Go client, and the writes and syncs of the node's Raft log.
//
// Go wraps an ordinary system call in a notice to its scheduler. When the
// process has idled, the first such notice wakes the runtime's monitor
// thread, which then polls every 20 µs for a while; and a call that lasts
// over 20 µs has its scheduler slot handed to another thread. A lock
// service idles between most calls, so on the machine of
// docs/PERFORMANCE.md this cost a node about a third of its CPU at one
// client, and the hand-offs during log syncs a quarter at 64.
//
// The calls here skip the notice. On a nonblocking socket a read or write
// never blocks (Conn waits for readiness through Go's poller, as net does),
// so nothing is lost. A log write or sync does block: while it lasts, the
// other goroutines of its scheduler slot wait, and so does a garbage
// collection's stop of the world (a disk that hangs freezes the process at
// its next collection). Every call of the node waits for that
// sync anyway. Under the race detector the calls are Go's ordinary ones,
// which order the goroutines that meet through them (sys_race.go); on
// systems other than Linux, Conn leaves connections as they are and the
// log's calls are os.File's.
package rawio

import (
	"context"
	"net"
)

// Listener returns ln whose accepted connections are Conns.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Conn(c), nil
}

// Dialer returns d's DialContext whose connections are Conns.
func Dialer(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Conn(c), nil
	}
}
