// Command waiters is a peer of the cleanup and request-id tests: through one
// Go client it queues -n Acquires of one lock (with -request-id, -ttl and
// -wait if given; without -wait they wait until the process dies), and
// prints each grant it gets ("granted TOKEN") or why an Acquire gave up
// ("gave up: ERROR"). A test kills or stops it, leaving its requests to the
// node.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "node API addresses, comma-separated")
	lock := flag.String("lock", "contended", "lock to wait for")
	n := flag.Int("n", 4000, "waiting acquires")
	rid := flag.String("request-id", "", "request id of every Acquire (default random)")
	ttl := flag.Duration("ttl", client.DefaultTTL, "lease TTL")
	wait := flag.Duration("wait", 0, "how long each Acquire waits (0: until granted)")
	flag.Parse()
	cfg := client.DefaultConfig(strings.Split(*addr, ",")...)
	cfg.Holder = "doomed"
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	opts := []client.Option{client.WithTTL(*ttl)}
	if *rid != "" {
		opts = append(opts, client.WithRequestID(*rid))
	}
	if *wait > 0 {
		opts = append(opts, client.WithWait(*wait))
	}
	done := make(chan struct{})
	for range *n {
		go func() {
			l, err := c.Acquire(context.Background(), *lock, opts...)
			if err != nil {
				fmt.Println("gave up:", err)
				done <- struct{}{}
				return
			}
			fmt.Println("granted", l.Token())
		}()
	}
	if *wait > 0 {
		for range *n {
			<-done
		}
		time.Sleep(time.Second) // the take-backs of those that gave up
		return
	}
	select {}
}
