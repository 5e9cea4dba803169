// Command fencelock is the fencelock lock service, its client tools and the
// fenced object store, in one binary. Run "fencelock help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencelock/fencelock"
)

const usage = `fencelock: distributed locks with fencing tokens, enforced at the resource.

Usage: fencelock COMMAND [flags] [args]

Start here:
  demo       reproduce the split-brain scenario, with and without fencing

Service:
  serve      run a lock service node (one-node Raft group by default)
  store      run the fenced object store (rejects writes with stale tokens)
  status     show the cluster: members, leader, term, each node's indexes and health
  members    list, add or remove voters; transfer leadership
  verify     prove fencing under faults: Jepsen-style scenarios, histories, checkers
  conformance  check an HTTP service's fencing against the cases every resource passes
  snapshot   back up the state (save), look into a backup (inspect), seed a new cluster (restore)
  keys       print the cluster's id and public signing keys; rotate the signing key
  tls        make a development CA and certificates for a mutual-TLS cluster
  token      draw a bearer token for an identity (serve --tokens-file)
  version    print the version and the revision it was built from

Locks:
  lock       run a command while holding a lock (passes FENCELOCK_TOKEN)
  acquire    acquire a lock and print its grant (for scripts)
  renew      renew a grant's lease
  release    release a grant
  describe   show a lock's holder, token, expiry and waiters
  list       list locks by name prefix

Internal:
  demo-worker  one worker process of the demo (started by demo)

Run "fencelock COMMAND --help" for a command's flags. Client commands find
the service with --server or FENCELOCK_SERVER (comma-separated host:port list,
default 127.0.0.1:7070). With --json, every command prints one JSON shape:
snake_case keys, tokens as numbers, durations as Go duration strings ("10s").

Exit status:
  0  done
  1  failed (status: a member down or no ready leader)
  2  usage error or bad input (a name, TTL or token the service refuses)
  3  the lock is held (a try-lock, or the wait ran out)
  4  the service is unreachable, or the outcome is unknown (retry)
  5  the lease is lost: renew or release of a grant that ended
  "lock" exits with COMMAND's status once it ran (128+N if signal N ended it;
  a lost lease sends COMMAND SIGTERM).
`

type command func(ctx context.Context, args []string, stdout, stderr io.Writer) error

var commands = map[string]command{
	"demo":        runDemo,
	"demo-worker": runDemoWorker,
	"serve":       runServe,
	"store":       runStore,
	"lock":        runLock,
	"acquire":     runAcquire,
	"renew":       runRenew,
	"release":     runRelease,
	"describe":    runDescribe,
	"list":        runList,
	"members":     runMembers,
	"status":      runStatus,
	"verify":      runVerify,
	"conformance": runConformance,
	"snapshot":    runSnapshot,
	"keys":        runKeys,
	"tls":         runTLS,
	"token":       runToken,
	"version":     runVersion,
}

// exitError carries a process exit status out of run.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// clientCommands talk to the lock service at --server.
var clientCommands = map[string]bool{"lock": true, "acquire": true, "renew": true, "release": true,
	"describe": true, "list": true, "members": true, "status": true}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 2 && args[0] == "help" && commands[args[1]] != nil {
		args = []string{args[1], "--help"} // "fencelock help lock"
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return exitError{2}
		}
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprint(stderr, usage)
		return usageErr("unknown command %q: run \"fencelock help\" for the list", args[0])
	}
	err := cmd(ctx, args[1:], stdout, stderr)
	if clientCommands[args[0]] && errors.Is(err, fencelock.ErrUnavailable) && ctx.Err() == nil {
		err = fmt.Errorf("%w\n(is the service running there? start one with \"fencelock serve\"; client commands find it with --server or FENCELOCK_SERVER, default 127.0.0.1:7070)", err)
	}
	return err
}

// badInput reports whether err refuses the caller's input (a name, TTL,
// token, ...), which exits 2 as a usage error does.
func badInput(err error) bool {
	for _, e := range []error{fencelock.ErrInvalidName, fencelock.ErrInvalidTTL, fencelock.ErrInvalidArgument,
		fencelock.ErrMissingToken, fencelock.ErrInvalidToken} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var ee exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintln(os.Stderr, "fencelock:", err)
		os.Exit(exitCode(err))
	}
}

// The documented exit statuses (see usage).
const (
	exitFailed      = 1
	exitUsage       = 2
	exitLockHeld    = 3
	exitUnavailable = 4
	exitLeaseLost   = 5
)

// exitCode is the status a command that failed with err exits with.
func exitCode(err error) int {
	switch {
	case errors.Is(err, errUsage), badInput(err):
		return exitUsage
	case errors.Is(err, fencelock.ErrLockHeld):
		return exitLockHeld
	case errors.Is(err, fencelock.ErrUnavailable), errors.Is(err, fencelock.ErrNotLeader),
		errors.Is(err, context.DeadlineExceeded):
		return exitUnavailable
	case errors.Is(err, fencelock.ErrLeaseExpired), errors.Is(err, fencelock.ErrNotHolder):
		return exitLeaseLost
	}
	return exitFailed
}
