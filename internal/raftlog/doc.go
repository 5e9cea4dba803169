// Package raftlog is the Raft log store of a fencelock node: a
// raft.LogStore kept in append-only segment files, with one fdatasync per
// batch of entries.
//
// hashicorp/raft-boltdb commits each batch as a bbolt transaction, which
// syncs twice (the pages, then the meta page). A lock grant is one Raft
// entry, so that second sync is on the path of every grant. This store
// writes a batch as consecutive records and syncs once. Segments are
// preallocated, and an append that passes the part written so far carries
// zeros to the next 64 KiB, so that the syncs in between change no file
// system metadata (fillChunk).
//
// Guarantees:
//
//   - When StoreLogs returns nil, every entry of the batch is on disk and
//     survives kill -9 and power loss (the file was fdatasync'ed; a new
//     segment file's directory entry is synced before it is written to).
//   - A batch that was being written when the process died is either whole,
//     a prefix of it, or absent after reopening: each record carries its
//     length, index and a CRC-32C, and reading stops at the first record
//     that does not check out. Open then cuts the file there, so bytes of an
//     unfinished write can never be read back later as an entry.
//   - After a suffix is deleted (DeleteRange up to the last index, which
//     Raft does when a follower's log conflicts with the leader's), the
//     deleted records are gone from the file before DeleteRange returns.
//   - Deleting a prefix (log compaction after a snapshot) first records the
//     new first index durably (the file "first"), then removes the segment
//     files that hold nothing else; entries below it never come back, also
//     those of a partly deleted segment. (They need not be committed: after
//     installing a snapshot Raft compacts up to the follower's own last
//     index, which can include a deposed leader's uncommitted entries.)
//   - Deleting everything removes the segments newest first, each removal
//     synced, then the record; Open finishes a deletion cut short.
//
// Gaps are allowed between segments, as raft-boltdb allows them: after a
// follower installs a snapshot, its next entry may not follow its last one.
// Within a batch, indexes must be consecutive and after the last index.
//
// Concurrency: all methods are safe for concurrent use. Writes (StoreLogs,
// DeleteRange) are serialised; GetLog is not blocked by a write's sync.
//
// Errors: a failed write or sync makes the store refuse every later write
// (ErrFailed), because after a failed fsync the state of the file is not
// known; the node must be restarted, which rereads the file. The failed
// append's bytes are overwritten with zeros first (as far as the file
// takes writes), so that the restart does not read back, from the page
// cache, records the disk may not hold.
package raftlog
