package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

// A record on disk:
//
//	length  uint32  bytes of payload
//	crc     uint32  CRC-32C of index and payload
//	index   uint64  the entry's Raft index
//	payload         term u64, type u8, appended-at unix nanoseconds i64
//	                (0 = unset), data length u32, data, extensions length
//	                u32, extensions
//
// All integers are little-endian. A length of zero marks the end of the
// written part of a segment (segments are preallocated with zeros).
const (
	headerSize  = 16
	payloadBase = 8 + 1 + 8 + 4 + 4
	// maxPayload bounds one entry so that a corrupted length is caught
	// without reading far past the end of the data.
	maxPayload = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBadRecord marks the end of the readable part of a segment.
var errBadRecord = errors.New("raftlog: bad record")

// appendRecord encodes l at the end of buf.
func appendRecord(buf []byte, l *raft.Log) ([]byte, error) {
	n := payloadBase + len(l.Data) + len(l.Extensions)
	if n > maxPayload {
		return buf, fmt.Errorf("raftlog: entry %d is %d bytes, more than the %d allowed", l.Index, n, maxPayload)
	}
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(n))
	buf = binary.LittleEndian.AppendUint32(buf, 0) // crc, filled in below
	buf = binary.LittleEndian.AppendUint64(buf, l.Index)
	buf = binary.LittleEndian.AppendUint64(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.LittleEndian.AppendUint64(buf, uint64(at))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	crc := crc32.Checksum(buf[start+8:], castagnoli)
	binary.LittleEndian.PutUint32(buf[start+4:], crc)
	return buf, nil
}

// recordLen reads a record header and returns the whole record's size, or
// errBadRecord if hdr is not the start of a plausible record for index.
func recordLen(hdr []byte, index uint64) (int, error) {
	if len(hdr) < headerSize {
		return 0, errBadRecord
	}
	n := binary.LittleEndian.Uint32(hdr)
	if n < payloadBase || n > maxPayload || binary.LittleEndian.Uint64(hdr[8:]) != index {
		return 0, errBadRecord
	}
	return headerSize + int(n), nil
}

// decodeRecord checks rec (a whole record, as sized by recordLen) and fills l.
func decodeRecord(rec []byte, index uint64, l *raft.Log) error {
	size, err := recordLen(rec, index)
	if err != nil || size != len(rec) {
		return errBadRecord
	}
	if crc32.Checksum(rec[8:], castagnoli) != binary.LittleEndian.Uint32(rec[4:]) {
		return errBadRecord
	}
	p := rec[headerSize:]
	term := binary.LittleEndian.Uint64(p)
	typ := raft.LogType(p[8])
	at := int64(binary.LittleEndian.Uint64(p[9:]))
	p = p[17:]
	dn := int(binary.LittleEndian.Uint32(p))
	p = p[4:]
	if dn > len(p)-4 {
		return errBadRecord
	}
	data := p[:dn:dn]
	p = p[dn:]
	en := int(binary.LittleEndian.Uint32(p))
	p = p[4:]
	if en != len(p) {
		return errBadRecord
	}
	*l = raft.Log{Index: index, Term: term, Type: typ}
	if dn > 0 {
		l.Data = data
	}
	if en > 0 {
		l.Extensions = p
	}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return nil
}
