package fsm

import (
	"encoding/json"
	"testing"
)

func TestCommand_EncodeDecode(t *testing.T) {
	for _, c := range []Command{
		{Op: OpAcquire, Now: 1700000000123456789, Name: "orders/42", RequestID: "r-1", Holder: "host/12", LeaseID: "0123456789abcdef0123456789abcdef", TTL: 10e9, Wait: true},
		{Op: OpRelease, Now: 5, Name: "x", LeaseID: "l", Token: 1 << 40},
		{Op: OpExpire, Now: -1, Name: "ünï/çødé", Token: 7},
		{Op: OpSetMember, Name: "n1", Holder: "127.0.0.1:7070"},
		{},
	} {
		for _, b := range [][]byte{c.Encode(), c.EncodeBinary()} {
			got, err := DecodeCommand(b)
			if err != nil || got != c {
				t.Errorf("DecodeCommand(%q) = %+v, %v; want %+v", b, got, err, c)
			}
		}
	}
}

// TestCommand_EncodeWritesJSON: nodes of the previous release read only
// JSON, so entries stay JSON while a cluster may mix versions.
func TestCommand_EncodeWritesJSON(t *testing.T) {
	c := Command{Op: OpAcquire, Now: 9, Name: "a", RequestID: "r", TTL: 3, Wait: true}
	var old Command
	if err := json.Unmarshal(c.Encode(), &old); err != nil || old != c {
		t.Fatalf("json.Unmarshal(Encode()) = %+v, %v; an older node could not apply this entry", old, err)
	}
}

// TestDecodeCommand_ReadsJSONEntries: JSON entries apply.
func TestDecodeCommand_ReadsJSONEntries(t *testing.T) {
	c := Command{Op: OpAcquire, Now: 9, Name: "a", RequestID: "r", TTL: 3, Wait: true}
	b, _ := json.Marshal(c)
	got, err := DecodeCommand(b)
	if err != nil || got != c {
		t.Fatalf("DecodeCommand(JSON of %+v) = %+v, %v", c, got, err)
	}
}

// TestDecodeCommand_RefusesDamage: every truncation, an unknown version
// and trailing bytes are errors, never a panic or a wrong command.
func TestDecodeCommand_RefusesDamage(t *testing.T) {
	b := Command{Op: OpAcquire, Now: 9, Name: "abc", RequestID: "rid", Holder: "h", LeaseID: "l", Token: 3, TTL: 4, Wait: true}.EncodeBinary()
	for n := 0; n < len(b); n++ {
		if c, err := DecodeCommand(b[:n]); err == nil {
			t.Errorf("DecodeCommand of the first %d of %d bytes = %+v, want an error", n, len(b), c)
		}
	}
	if _, err := DecodeCommand(append([]byte{99}, b[1:]...)); err == nil {
		t.Errorf("DecodeCommand with version 99 = nil error")
	}
	if _, err := DecodeCommand(append(b, 0)); err == nil {
		t.Errorf("DecodeCommand with a trailing byte = nil error")
	}
	huge := append([]byte{commandV1, byte(OpAcquire), 0}, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if _, err := DecodeCommand(huge); err == nil {
		t.Errorf("DecodeCommand with a name length past the end = nil error")
	}
}
