package wire

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// TestAPIDocCoversTheProto fails when docs/API.md misses a method of
// lock.proto, a field of a method's request or answer (nested messages of
// the package included) in that method's section, or a wire code in the
// errors table with the Connect code it travels with.
func TestAPIDocCoversTheProto(t *testing.T) {
	b, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	services := fencelockv1.File_fencelock_v1_lock_proto.Services()
	// A method's request and answer are documented in its own section:
	// another method carrying them (Session) need not repeat their fields.
	own := map[protoreflect.FullName]bool{}
	for i := 0; i < services.Len(); i++ {
		for j := 0; j < services.Get(i).Methods().Len(); j++ {
			m := services.Get(i).Methods().Get(j)
			own[m.Input().FullName()], own[m.Output().FullName()] = true, true
		}
	}
	for i := 0; i < services.Len(); i++ {
		svc := services.Get(i)
		for j := 0; j < svc.Methods().Len(); j++ {
			m := svc.Methods().Get(j)
			heading := "### " + string(svc.Name()) + "." + string(m.Name())
			sec, ok := section(doc, heading)
			if !ok {
				t.Errorf("docs/API.md has no section %q", heading)
				continue
			}
			for _, msg := range []protoreflect.MessageDescriptor{m.Input(), m.Output()} {
				seen := map[protoreflect.FullName]bool{}
				for name := range own {
					seen[name] = name != msg.FullName()
				}
				for _, f := range fieldNames(msg, seen) {
					if !strings.Contains(sec, "`"+f+"`") {
						t.Errorf("docs/API.md, %s: field `%s` of %s (or of a message in it) is not named", heading, f, msg.Name())
					}
				}
			}
		}
	}
	errs, ok := section(doc, "## Errors")
	if !ok {
		t.Fatal(`docs/API.md has no section "## Errors"`)
	}
	for code, cc := range connectCodes {
		if row := "| `" + code + "` | `" + cc.String() + "` |"; !strings.Contains(errs, row) {
			t.Errorf("docs/API.md's errors table has no row starting %q", row)
		}
	}
}

// section returns the text from heading to the next heading of the same
// or a higher level.
func section(doc, heading string) (string, bool) {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return "", false
	}
	rest := doc[i+len(heading)+2:]
	level := strings.Repeat("#", strings.Index(heading, " "))
	for _, end := range []string{"\n" + level + " ", "\n" + level[:len(level)-1] + " "} {
		if k := strings.Index(rest, end); k >= 0 && len(end) > 2 {
			rest = rest[:k]
		}
	}
	return rest, true
}

// fieldNames returns the JSON names of msg's fields and, for fields whose
// type is a message of fencelock.v1 not in seen, of its fields.
func fieldNames(msg protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) []string {
	if seen[msg.FullName()] {
		return nil
	}
	seen[msg.FullName()] = true
	var names []string
	for k := 0; k < msg.Fields().Len(); k++ {
		f := msg.Fields().Get(k)
		names = append(names, f.JSONName())
		if sub := f.Message(); sub != nil && sub.ParentFile().Package() == msg.ParentFile().Package() {
			names = append(names, fieldNames(sub, seen)...)
		}
	}
	return names
}
