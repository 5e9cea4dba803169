package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fencelock/fencelock/client"
)

func main() {
	cfg := client.DefaultConfig(os.Args[1])
	cfg.NoPipe = len(os.Args) > 2
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for run := 0; run < 30; run++ {
		start := time.Now()
		deadline := start.Add(time.Second)
		actx, cancel := context.WithDeadline(ctx, deadline)
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					t0 := time.Now()
					l, err := c.Acquire(actx, fmt.Sprintf("probe-%d", w))
					t1 := time.Now()
					if err != nil {
						if actx.Err() != nil {
							if t1.Sub(t0) > 100*time.Millisecond {
								li, derr := c.Describe(ctx, fmt.Sprintf("probe-%d", w))
								fmt.Printf("run %d worker %d: cancelled acquire took %v; lock now %+v %v\n", run, w, t1.Sub(t0), li, derr)
							}
							return
						}
						fmt.Println("acquire err", err)
						continue
					}
					rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
					err = l.Release(rctx)
					rcancel()
					t2 := time.Now()
					if err != nil {
						fmt.Println("release err", err)
					}
					if t1.Sub(t0) > 100*time.Millisecond || t2.Sub(t1) > 100*time.Millisecond {
						fmt.Printf("%s run %d worker %d slow: acquire %v release %v\n", t0.Format("15:04:05.000"), run, w, t1.Sub(t0), t2.Sub(t1))
					}
				}
			}()
		}
		wg.Wait()
		cancel()
		if el := time.Since(start); el > 1200*time.Millisecond {
			fmt.Printf("run %d took %v\n", run, el)
		}
	}
}
