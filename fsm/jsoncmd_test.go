package fsm

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fencelock/fencelock"
)

// FuzzEncode_MatchesEncodingJSON: Encode writes exactly json.Marshal's bytes,
// which nodes of the previous release decode with encoding/json.
func FuzzEncode_MatchesEncodingJSON(f *testing.F) {
	f.Add(uint8(1), int64(1700000000123456789), "orders/42", "r-1", "host/12", "0123456789abcdef", uint64(0), int64(10e9), true)
	f.Add(uint8(2), int64(-1), "ünï<&>", "a\"b\\c", "\x00\n\t\b\f", "\xff\u2028", uint64(1<<63), int64(-5), false)
	f.Add(uint8(0), int64(0), "", "", "", "", uint64(0), int64(0), false)
	f.Fuzz(func(t *testing.T, op uint8, now int64, name, rid, holder, lease string, token uint64, ttl int64, wait bool) {
		c := Command{Op: Op(op), Now: now, Name: fencelock.LockName(name), RequestID: rid, Holder: holder,
			LeaseID: fencelock.LeaseID(lease), Token: fencelock.Token(token), TTL: ttl, Wait: wait}
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Encode(); !bytes.Equal(got, want) {
			t.Fatalf("Encode() = %s\njson.Marshal = %s", got, want)
		}
		// And it decodes to what encoding/json decodes.
		var viaJSON Command
		if err := json.Unmarshal(want, &viaJSON); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(want)
		if err != nil || got != viaJSON {
			t.Fatalf("DecodeCommand(%s) = %+v, %v; encoding/json: %+v", want, got, err, viaJSON)
		}
	})
}

// FuzzDecode_MatchesEncodingJSON: for any JSON entry, DecodeCommand agrees
// with encoding/json: the same command, or an error where it errs.
func FuzzDecode_MatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"op":1,"now":5,"name":"a","rid":"r","holder":"h","lease":"l","token":7,"ttl":9,"wait":true}`,
		`{"op":1,"now":5,"name":"a"}`,
		`{"op":256,"now":5,"name":"a"}`,
		`{"op":1,"now":-0,"name":"a","token":-1}`,
		`{"op":01,"now":5,"name":"a"}`,
		`{"op":1,"now":5.5,"name":"a"}`,
		`{"op":1,"now":5,"name":"a\u0041","rid":"x","rid":"y"}`,
		`{"op":1,"now":5,"name":"a","wait":false}`,
		`{"op":1,"now":99999999999999999999,"name":"a"}`,
		`{"op":1,"now":5,"name":"a"} `,
		`{"op":1,"now":5,"name":"a"}x`,
		`{"OP":1,"now":5,"name":"\xff"}`,
		`{"op":1,"now":5,"name":"a","token":18446744073709551616}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '{' {
			return
		}
		var want Command
		wantErr := json.Unmarshal(b, &want)
		got, err := DecodeCommand(b)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("DecodeCommand(%q) error %v; encoding/json error %v", b, err, wantErr)
		}
		if err == nil && got != want {
			t.Fatalf("DecodeCommand(%q) = %+v; encoding/json: %+v", b, got, want)
		}
	})
}

func BenchmarkCommand_Encode(b *testing.B) {
	c := Command{Op: OpAcquire, Now: 1700000000123456789, Name: "orders/42", RequestID: "0123456789abcdef", Holder: "host/12", LeaseID: "0123456789abcdef0123456789abcdef", TTL: 10e9, Wait: true}
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			c.Encode()
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			json.Marshal(c)
		}
	})
	enc := c.Encode()
	b.Run("decode-fast", func(b *testing.B) {
		for b.Loop() {
			DecodeCommand(enc)
		}
	})
	b.Run("decode-encoding-json", func(b *testing.B) {
		for b.Loop() {
			var c Command
			json.Unmarshal(enc, &c)
		}
	})
}
