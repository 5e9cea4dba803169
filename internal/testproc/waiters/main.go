// Command waiters is a peer of the cleanup tests: through one Go client it
// queues -n Acquires of one lock that wait until the process dies, and
// prints each grant it gets ("granted TOKEN"). A test kills it with SIGKILL,
// leaving its requests to the node.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/fencelock/fencelock/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "node API address")
	lock := flag.String("lock", "contended", "lock to wait for")
	n := flag.Int("n", 4000, "waiting acquires")
	flag.Parse()
	cfg := client.DefaultConfig(*addr)
	cfg.Holder = "doomed"
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for range *n {
		go func() {
			l, err := c.Acquire(context.Background(), *lock)
			if err != nil {
				fmt.Fprintln(os.Stderr, "acquire:", err)
				return
			}
			fmt.Println("granted", l.Token())
		}()
	}
	select {}
}
