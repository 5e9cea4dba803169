// Package buildinfo says which build of fencelock is running: the module
// version and the VCS revision Go records in the binary.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`            // the module version: "v1.2.3", or "(devel)" for a build from a checkout
	Revision  string `json:"revision,omitempty"` // the VCS revision, when built from a checkout
	Modified  bool   `json:"modified,omitempty"` // the checkout had uncommitted changes
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// Read returns the running binary's build information, read once.
var Read = sync.OnceValue(read)

func read() Info {
	in := Info{Version: "(unknown)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the one-line form: "v1.2.3 (abcdef012345, go1.26.8 linux/amd64)".
func (in Info) String() string {
	s := in.Version + " ("
	if in.Revision != "" {
		rev := in.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += rev
		if in.Modified {
			s += "+modified"
		}
		s += ", "
	}
	return s + in.GoVersion + " " + in.Platform + ")"
}
