package fsm

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock"
)

// The log's JSON, without reflection. Every entry is encoded and decoded
// once per operation, and encoding/json's reflection was about a sixth of
// the server's CPU at high load. The bytes stay exactly what json.Marshal
// writes (older nodes decode them with encoding/json), so these are fast
// paths only: appendJSON declines a command with a string that json.Marshal
// would escape, parseJSON declines anything but the plain form appendJSON
// writes, and the callers fall back to encoding/json. Fuzz tests hold both
// to encoding/json's answers.

// appendJSON appends c as json.Marshal encodes it, or reports false (and
// appends nothing) if a string field needs escaping.
func appendJSON(b []byte, c Command) ([]byte, bool) {
	for _, s := range [...]string{string(c.Name), c.RequestID, c.Holder, string(c.LeaseID)} {
		if !plainJSON(s) {
			return b, false
		}
	}
	b = append(b, `{"op":`...)
	b = strconv.AppendUint(b, uint64(c.Op), 10)
	b = append(b, `,"now":`...)
	b = strconv.AppendInt(b, c.Now, 10)
	b = append(b, `,"name":"`...)
	b = append(b, c.Name...)
	b = append(b, '"')
	if c.RequestID != "" {
		b = append(b, `,"rid":"`...)
		b = append(b, c.RequestID...)
		b = append(b, '"')
	}
	if c.Holder != "" {
		b = append(b, `,"holder":"`...)
		b = append(b, c.Holder...)
		b = append(b, '"')
	}
	if c.LeaseID != "" {
		b = append(b, `,"lease":"`...)
		b = append(b, c.LeaseID...)
		b = append(b, '"')
	}
	if c.Token != 0 {
		b = append(b, `,"token":`...)
		b = strconv.AppendUint(b, uint64(c.Token), 10)
	}
	if c.TTL != 0 {
		b = append(b, `,"ttl":`...)
		b = strconv.AppendInt(b, c.TTL, 10)
	}
	if c.Wait {
		b = append(b, `,"wait":true`...)
	}
	return append(b, '}'), true
}

// plainJSON reports whether json.Marshal writes s as it is: printable ASCII
// without the quote, the backslash and the HTML characters it escapes.
func plainJSON[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// parseJSON decodes the form appendJSON writes. ok is false for anything
// else (other key order, whitespace, escapes, numbers out of range), which
// the caller hands to encoding/json.
func parseJSON(b []byte) (c Command, ok bool) {
	p := jsonParser{b: b}
	if !p.lit(`{"op":`) {
		return Command{}, false
	}
	op, ok := p.uint(8)
	if !ok || !p.lit(`,"now":`) {
		return Command{}, false
	}
	c.Op = Op(op)
	if c.Now, ok = p.int(); !ok || !p.lit(`,"name":`) {
		return Command{}, false
	}
	name, ok := p.str()
	if !ok {
		return Command{}, false
	}
	c.Name = fencelock.LockName(name)
	if p.lit(`,"rid":`) {
		if c.RequestID, ok = p.str(); !ok {
			return Command{}, false
		}
	}
	if p.lit(`,"holder":`) {
		if c.Holder, ok = p.str(); !ok {
			return Command{}, false
		}
	}
	if p.lit(`,"lease":`) {
		lease, ok := p.str()
		if !ok {
			return Command{}, false
		}
		c.LeaseID = fencelock.LeaseID(lease)
	}
	if p.lit(`,"token":`) {
		tok, ok := p.uint(64)
		if !ok {
			return Command{}, false
		}
		c.Token = fencelock.Token(tok)
	}
	if p.lit(`,"ttl":`) {
		if c.TTL, ok = p.int(); !ok {
			return Command{}, false
		}
	}
	if p.lit(`,"wait":true`) {
		c.Wait = true
	}
	if !p.lit("}") || len(p.b) != 0 {
		return Command{}, false
	}
	return c, true
}

type jsonParser struct{ b []byte }

func (p *jsonParser) lit(s string) bool {
	if !bytes.HasPrefix(p.b, []byte(s)) {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// number returns the leading run of JSON number bytes (sign and digits
// only; a fraction or exponent makes the caller decline).
func (p *jsonParser) number() string {
	i := 0
	if i < len(p.b) && p.b[i] == '-' {
		i++
	}
	for i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9' {
		i++
	}
	s := string(p.b[:i])
	p.b = p.b[i:]
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 1 && digits[0] == '0' { // JSON allows no leading zeros
		return ""
	}
	return s
}

func (p *jsonParser) uint(bits int) (uint64, bool) {
	s := p.number()
	if s == "" || s[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, bits)
	return v, err == nil
}

func (p *jsonParser) int() (int64, bool) {
	s := p.number()
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// str reads a quoted string of plain characters (no escapes, printable
// ASCII), which decodes to itself.
func (p *jsonParser) str() (string, bool) {
	if len(p.b) == 0 || p.b[0] != '"' {
		return "", false
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			s := string(p.b[1:i])
			p.b = p.b[i+1:]
			return s, true
		case c < 0x20, c > 0x7e, c == '\\':
			return "", false
		}
	}
	return "", false
}
