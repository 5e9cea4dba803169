// Package s3 fences writes to S3-compatible object storage (AWS S3 and
// servers that implement its conditional writes), on aws-sdk-go-v2.
//
// S3 cannot compare tokens, so a Bucket keeps them itself and makes every
// write a compare-and-swap with If-Match / If-None-Match: *, which S3 has
// honoured on PutObject since 2024 (412 Precondition Failed on a failed
// condition, 409 ConditionalRequestConflict on a race; both make the write
// read again and retry).
//
// # Layout
//
// Under the Bucket's prefix, with names path-escaped:
//
//	fences/DOMAIN        the domain's manifest: highest token, a sequence
//	                     number, and each key's data object and version
//	keys/KEY             the domain KEY belongs to (written once)
//	data/KEY/TOKEN-NONCE one immutable object per accepted write
//
// A Put writes its value to a new data object, then commits it by
// rewriting the domain's manifest on the condition that its ETag is still
// the one read; a refused commit deletes the data object, and a commit
// deletes the data object it replaced. Get reads the key's owner, the
// domain's manifest and the data object it names.
//
// # Why not If-Match on the object itself
//
// An S3 ETag is a hash of the content. If a newer holder rewrites the very
// bytes a stale holder read, the ETag repeats and the stale holder's
// If-Match succeeds: the ABA problem. A manifest's content always changes
// (its sequence number rises with every write, and each write names a data
// object no other write uses), so no two versions of it share an ETag and a
// condition on it cannot be revived.
//
// # What a bucket needs
//
// Versioning is not needed (either setting works). The server must enforce
// If-Match and If-None-Match: * on PutObject atomically: AWS S3 does;
// versitygw v1.8.0 (posix backend) passes this package's tests, including a
// check that of 16 racing conditional writes exactly one wins. A server that
// ignores the conditions makes the fence unsafe; run TestServer_ConditionalWrites
// against yours. All writers must go through a Bucket: a plain PutObject to
// the data or manifest objects bypasses the fence, and a plain reader of
// data/ may see a value a newer write has replaced. Keys are at most
// MaxKeyLen bytes (and each path segment within the server's file name
// limit, 255 bytes for versitygw's posix backend). A write whose outcome is
// unknown (a timeout) may leave an orphan under data/ that no manifest names:
// it costs storage only (do not expire data/ with a lifecycle rule: current
// values live there too). A domain's manifest lists every key in it,
// so keep domains to thousands of keys, not millions.
package s3
