package fsm

import (
	"reflect"
	"testing"
)

func TestCommand_EncodeDecode(t *testing.T) {
	t.Parallel()
	seed := []byte("0123456789abcdef0123456789abcdef")
	for _, c := range []Command{
		{Now: 1700000000123456789, Payload: Acquire{Name: "orders/42", RequestID: "r-1", Holder: "host/12", LeaseID: "0123456789abcdef0123456789abcdef", TTL: 10e9, Wait: true, Owner: "billing"}},
		{Now: 5, Payload: Release{Name: "x", LeaseID: "l", Token: 1 << 40}},
		{Now: -1, Payload: Expire{Name: "ünï/çødé", Token: 7}},
		{Payload: CancelWait{Name: "x", RequestID: "r", Owner: "o"}},
		{Payload: Detach{Name: "x", RequestID: "r", Owner: "o"}},
		{Payload: SetMember{NodeID: "n1", APIAddr: "127.0.0.1:7070"}},
		{Payload: DropMember{NodeID: "n1"}},
		{Payload: SetIdentity{ClusterID: "c", KeyID: "k", Seed: seed}},
		{Payload: RotateKey{KeyID: "k2", Seed: seed}},
	} {
		b := c.Encode()
		if b[0] != formatVersion {
			t.Errorf("Encode(%+v) starts with %d, want the format version %d", c, b[0], formatVersion)
		}
		got, err := DecodeCommand(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("DecodeCommand(%q) = %+v, %v; want %+v", b, got, err, c)
		}
	}
	if _, err := DecodeCommand(Command{}.Encode()); err == nil {
		t.Error("a command without a payload decoded")
	}
}

// TestDecodeCommand_RefusesDamage: every truncation, another format
// version, JSON and trailing bytes are errors, never a panic or a wrong
// command.
func TestDecodeCommand_RefusesDamage(t *testing.T) {
	t.Parallel()
	b := Command{Now: 9, Payload: Acquire{Name: "abc", RequestID: "rid", Holder: "h", LeaseID: "l", TTL: 4, Wait: true}}.Encode()
	for n := 0; n < len(b); n++ {
		if c, err := DecodeCommand(b[:n]); err == nil {
			t.Errorf("DecodeCommand of the first %d of %d bytes = %+v, want an error", n, len(b), c)
		}
	}
	if _, err := DecodeCommand(append([]byte{99}, b[1:]...)); err == nil {
		t.Errorf("DecodeCommand with version 99 = nil error")
	}
	if _, err := DecodeCommand([]byte(`{"op":1,"now":9,"name":"abc"}`)); err == nil {
		t.Errorf("DecodeCommand of a JSON command = nil error")
	}
	if _, err := DecodeCommand(append(b, 0)); err == nil {
		t.Errorf("DecodeCommand with a trailing byte = nil error")
	}
	huge := append([]byte{formatVersion, byte(OpAcquire), 0}, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if _, err := DecodeCommand(huge); err == nil {
		t.Errorf("DecodeCommand with a name length past the end = nil error")
	}
}

func BenchmarkCommand_EncodeDecode(b *testing.B) {
	c := Command{Now: 1700000000123456789, Payload: Acquire{Name: "orders/42", RequestID: "0123456789abcdef", Holder: "host/12", LeaseID: "0123456789abcdef0123456789abcdef", TTL: 10e9, Wait: true}}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			c.Encode()
		}
	})
	enc := c.Encode()
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeCommand(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
