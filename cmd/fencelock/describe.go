package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fencelock/fencelock"
)

// lockJSON is a lock as describe and list print it with --json.
type lockJSON struct {
	Name      string       `json:"name"`
	Holder    string       `json:"holder,omitempty"`
	Token     uint64       `json:"token,omitempty"`
	TTL       string       `json:"ttl,omitempty"`
	Acquired  *time.Time   `json:"acquired,omitempty"`
	Expires   *time.Time   `json:"expires,omitempty"`
	ExpiresIn string       `json:"expires_in,omitempty"`
	Waiters   []waiterJSON `json:"waiters"`
}

type waiterJSON struct {
	Holder string `json:"holder"`
	TTL    string `json:"ttl"`
}

func toJSON(li fencelock.LockInfo) lockJSON {
	j := lockJSON{Name: string(li.Name), Holder: li.Holder, Token: uint64(li.Token), Waiters: []waiterJSON{}}
	if li.Token != 0 {
		j.TTL = li.TTL.String()
	}
	if !li.Acquired.IsZero() {
		j.Acquired = &li.Acquired
	}
	if !li.Expires.IsZero() {
		j.Expires = &li.Expires
		j.ExpiresIn = time.Until(li.Expires).Round(time.Millisecond).String()
	}
	for _, w := range li.Waiters {
		j.Waiters = append(j.Waiters, waiterJSON{Holder: w.Holder, TTL: w.TTL.String()})
	}
	return j
}

func printLock(w io.Writer, li fencelock.LockInfo) {
	if li.Token == 0 {
		fmt.Fprintf(w, "%s\tfree\n", li.Name)
		return
	}
	exp := "unknown"
	if !li.Expires.IsZero() {
		exp = time.Until(li.Expires).Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "%s\ttoken=%d\tholder=%q\tttl=%s\texpires_in=%s\twaiters=%d\n",
		li.Name, li.Token, li.Holder, li.TTL, exp, len(li.Waiters))
}

func runDescribe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("describe", "describe NAME [flags]", stderr)
	newClient := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	name, rest, err := splitName(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErr("describe takes one NAME, got extra %q", rest)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	li, err := c.Describe(ctx, name)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(toJSON(li))
	}
	printLock(stdout, li)
	for i, w := range li.Waiters {
		fmt.Fprintf(stdout, "  waiter %d: holder=%q ttl=%s\n", i+1, w.Holder, w.TTL)
	}
	return nil
}

func runList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("list", "list [PREFIX] [flags]", stderr)
	newClient := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON, one object per line")
	limit := fs.Int("limit", 0, "stop after this many locks (0: all)")
	// Flags may come before or after PREFIX ("list jobs/ --json").
	if err := parse(fs, args); err != nil {
		return err
	}
	prefix := fs.Arg(0)
	if fs.NArg() > 0 {
		if err := parse(fs, fs.Args()[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return usageErr("list takes at most one PREFIX, got %q and %q", prefix, fs.Args())
		}
	}
	if *limit < 0 {
		return usageErr("--limit %d: want 0 (all) or more", *limit)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	enc := json.NewEncoder(stdout)
	n, page := 0, ""
	for {
		locks, next, err := c.List(ctx, prefix, page, 500)
		if err != nil {
			return err
		}
		for _, li := range locks {
			if *limit > 0 && n >= *limit {
				return nil
			}
			n++
			if *asJSON {
				if err := enc.Encode(toJSON(li)); err != nil {
					return err
				}
			} else {
				printLock(stdout, li)
			}
		}
		if next == "" {
			return nil
		}
		page = next
	}
}
