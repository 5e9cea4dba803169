package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/tlsconf"
)

// errUsage marks a command-line mistake (exit status 2).
var errUsage = errors.New("usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// newFlags returns a flag set that prints "usage" and the flag defaults on
// --help and on a flag error.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fencelock %s\n\nFlags:\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			typ, help := flag.UnquoteUsage(f)
			fmt.Fprintf(stderr, "  --%s %s\n    \t%s", f.Name, typ, help)
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				fmt.Fprintf(stderr, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(stderr)
		})
	}
	return fs
}

// parse parses args, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v (see fencelock %s --help)", err, fs.Name())
	}
	return nil
}

// clientFlags adds --server and returns a constructor for the client.
func clientFlags(fs *flag.FlagSet) func() (*client.Client, error) {
	def := os.Getenv("FENCELOCK_SERVER")
	if def == "" {
		def = "127.0.0.1:7070"
	}
	server := fs.String("server", def, "service endpoints, comma-separated host:port (env FENCELOCK_SERVER)")
	retry := fs.Duration("retry-timeout", 10*time.Second, "how long a call keeps retrying while the service is unreachable or leaderless (then exit 4)")
	cacert := fs.String("cacert", os.Getenv("FENCELOCK_CACERT"), "CA file the nodes' certificates chain to: talk HTTPS (env FENCELOCK_CACERT)")
	cert := fs.String("cert", os.Getenv("FENCELOCK_CERT"), "client certificate file, for a cluster that asks for one (env FENCELOCK_CERT)")
	key := fs.String("key", os.Getenv("FENCELOCK_KEY"), "the client certificate's key file (env FENCELOCK_KEY)")
	return func() (*client.Client, error) {
		if *retry <= 0 {
			return nil, usageErr("--retry-timeout %v: want a positive duration", *retry)
		}
		var eps []string
		for _, e := range strings.Split(*server, ",") {
			if e = strings.TrimSpace(e); e != "" {
				eps = append(eps, e)
			}
		}
		if len(eps) == 0 {
			return nil, usageErr("--server is empty")
		}
		cfg := client.DefaultConfig(eps...)
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfg.RetryTimeout = *retry
		cfg.Token = strings.TrimSpace(os.Getenv("FENCELOCK_AUTH_TOKEN")) // every call, on a cluster with --tokens-file
		if *cacert != "" || *cert != "" {
			tc, err := tlsconf.Client(tlsconf.Files{Cert: *cert, Key: *key, CA: *cacert})
			if err != nil {
				return nil, usageErr("%v", err)
			}
			cfg.TLS = tc
		}
		return client.NewFromConfig(cfg)
	}
}

// adminOf returns the administrative calls of c, with the admin token of
// FENCELOCK_ADMIN_TOKEN (membership changes, key rotations, backups).
func adminOf(c *client.Client) *admin.Client {
	return admin.New(c, strings.TrimSpace(os.Getenv("FENCELOCK_ADMIN_TOKEN")))
}

// waitFlag is a duration flag that also accepts "forever".
type waitFlag struct {
	d       time.Duration
	forever bool
}

func (w *waitFlag) String() string {
	if w.forever {
		return "forever"
	}
	return w.d.String()
}

func (w *waitFlag) Set(s string) error {
	if s == "forever" {
		w.forever = true
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration such as 30s, 0 for a try-lock, or forever")
	}
	w.d, w.forever = d, false
	return nil
}

func (w *waitFlag) options() []client.Option {
	if w.forever {
		return nil
	}
	return []client.Option{client.WithWait(w.d)}
}
