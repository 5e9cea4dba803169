package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/fencelock/fencelock/internal/buildinfo"
)

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "version [flags]\n\n"+
		"Prints this binary's version: the module version (\"(devel)\" for a build from a\n"+
		"checkout), the VCS revision it was built from, and the Go version.", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("version takes no arguments")
	}
	bi := buildinfo.Read()
	if *asJSON {
		return json.NewEncoder(stdout).Encode(bi)
	}
	_, err := fmt.Fprintln(stdout, "fencelock", bi)
	return err
}
