package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/httpfence"
)

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("conformance", "conformance URL [flags]\n\n"+
		"Drives an HTTP service that implements the fencing contract (package\n"+
		"httpfence, the fenced store) through the cases every fenced resource must\n"+
		"pass, and prints what passed. Writes are PUT URL/KEY with Fencing-Token and\n"+
		"Fencing-Domain, reads GET URL/KEY. Keys and domains start with\n"+
		"fencelocktest/. Exit status 1 if a case fails.\n\n"+
		"  fencelock conformance http://127.0.0.1:7080/v1/objects --fences http://127.0.0.1:7080/v1/fences", stderr)
	fences := fs.String("fences", "", "base URL of the service's fence endpoints (POST/GET {domain}); without it the cases that raise or read a domain's token alone are skipped")
	restart := fs.String("restart-cmd", "", "shell command that restarts the service on its durable state; runs the restart case (skipped without it)")
	timeout := fs.Duration("timeout", 2*time.Minute, "time for the whole run")
	asJSON := fs.Bool("json", false, "print one JSON result per case")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErr("conformance: missing URL")
	}
	base := fs.Arg(0)
	if err := parse(fs, fs.Args()[1:]); err != nil { // flags after the URL
		return err
	}
	if fs.NArg() != 0 {
		return usageErr("conformance takes one URL, got also %q", fs.Args())
	}
	var opts []httpfence.ClientOption
	if *fences != "" {
		opts = append(opts, httpfence.WithFences(*fences))
	}
	c, err := httpfence.NewClient(base, opts...)
	if err != nil {
		return usageErr("conformance: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	target := conformance.Target{Resource: c}
	if *restart != "" {
		target.Restart = func(t conformance.T) conformance.Target {
			if err := restartService(t.Context(), *restart, base, stderr); err != nil {
				t.Fatalf("restart: %v", err)
			}
			return conformance.Target{Resource: c}
		}
	}
	results := conformance.Run(ctx, target, func(r conformance.Result) { printResult(stdout, r, *asJSON) })
	failed := 0
	for _, r := range results {
		if r.Outcome == conformance.Fail {
			failed++
		}
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "%d cases, %d failed\n", len(results), failed)
	}
	if failed > 0 {
		return exitError{1}
	}
	return nil
}

func printResult(w io.Writer, r conformance.Result, asJSON bool) {
	if asJSON {
		_ = json.NewEncoder(w).Encode(r)
		return
	}
	fmt.Fprintf(w, "%-4s  %s (%v)\n", map[string]string{conformance.Pass: "PASS", conformance.Fail: "FAIL", conformance.Skip: "SKIP"}[r.Outcome],
		r.Case, r.Elapsed.Round(time.Millisecond))
	for _, m := range r.Messages {
		fmt.Fprintf(w, "      %s\n", m)
	}
}

// restartService runs cmd with sh and waits until base answers again.
func restartService(ctx context.Context, cmd, base string, stderr io.Writer) error {
	sh := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	sh.Stdout, sh.Stderr = stderr, stderr
	sh.Env = os.Environ()
	if err := sh.Run(); err != nil {
		return fmt.Errorf("%q: %w", cmd, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%s does not answer 30s after the restart: %w", base, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
