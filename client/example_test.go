package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/server"
)

// exampleServer starts a throwaway one-node service and returns its address.
func exampleServer() (string, func()) {
	dir, _ := os.MkdirTemp("", "fencelock-example-")
	raft, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg := server.DefaultConfig()
	cfg.DataDir, cfg.RaftAddr = dir, raft.Addr().String()
	raft.Close()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := server.Open(context.Background(), cfg)
	if err != nil {
		panic(err)
	}
	_ = s.WaitReady(context.Background())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go api.HTTPServer(api.Handler(s)).Serve(ln) // HTTP/2 without TLS, as the client speaks
	return ln.Addr().String(), func() { ln.Close(); s.Close(); os.RemoveAll(dir) }
}

func Example() {
	addr, stop := exampleServer()
	defer stop()

	c, err := client.New(addr)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	lock, err := c.Acquire(ctx, "report.pdf", client.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	// Write under lock.Context(), attaching lock.Token() to every write.
	fmt.Println("holding:", lock.Context().Err() == nil, "token > 0:", lock.Token() > 0)

	_, err = c.TryAcquire(ctx, "report.pdf")
	fmt.Println("second try-lock is refused:", errors.Is(err, fencelock.ErrLockHeld))

	_ = lock.Release(ctx)
	fmt.Println("context done after release:", lock.Context().Err() != nil)
	// Output:
	// holding: true token > 0: true
	// second try-lock is refused: true
	// context done after release: true
}

func ExampleDo() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()

	err := client.Do(context.Background(), c, "payments/order-42", func(ctx context.Context, token fencelock.Token) error {
		// Pass token to the resource, e.g. postgres row fence or the fenced store.
		fmt.Println("in critical section with a token:", token > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// in critical section with a token: true
	// err: <nil>
}
