// Package store is a fenced object store served over HTTP: the resource of
// report.pdf example of the demo, which refuses writes from a lock holder whose
// fencing token is stale, and a Go client for it.
//
// # Guarantees
//
// Every write (PUT, DELETE, and POST to a fence) carries a fencing token in
// the Fencing-Token header and belongs to a fence domain (the Fencing-Domain
// header, by default the object key itself). The store applies fence.Admit
// and the write in one bbolt transaction: a write is stored if and only if its
// token is at least the highest token its domain has accepted, and that token
// becomes the domain's highest in the same commit. A PUT or DELETE of an
// existing object must name the domain its current version was written in
// (otherwise a stale holder could name a domain nobody raised); a write
// naming another is refused with fencelock.ErrInvalidArgument. A refused
// write stores nothing and changes no highest token. Highest tokens and objects are on disk
// and survive a restart.
//
// Refusals are typed on the wire and in the Go client: a stale token is 409
// Conflict with {"error":"stale_fencing_token","domain":...,"token":...,
// "highest":...}, which Client turns back into a *fencelock.StaleTokenError;
// a missing token (or 0) is 428 Precondition Required (fencelock.ErrMissingToken);
// a malformed token or key is 400; a body over the size limit is 413
// (fencelock.ErrTooLarge); a failed If-Match / If-None-Match precondition is
// 412 (fencelock.ErrPreconditionFailed).
//
// Every object version has an ETag that no other version of any object shares,
// and records the token and domain that wrote it (response headers ETag,
// Fencing-Token, Fencing-Domain). If-Match and If-None-Match: * work as in S3
// conditional writes. A write with an Idempotency-Key header is applied at
// most once: a repeat with the same key gets the first answer again (with
// Idempotent-Replayed: true), recorded in the same transaction as the write;
// reusing a key for a different request is 422.
//
// # Access
//
// With Config.ACL set and Active, every request of the object and fence
// endpoints is checked with acl.ACL.Check before the store reads or writes
// anything: a PUT or DELETE needs acl.Lock on the object key and on its
// fence domain; a fence raise (POST) needs acl.Lock on the domain; a GET or
// HEAD of an object needs acl.Read on its key, and of a fence acl.Read on
// its domain. A caller without a credential gets 401 Unauthorized
// (fencelock.ErrUnauthenticated), one without the permission 403 Forbidden
// (fencelock.ErrPermissionDenied). /metrics and /healthz are not checked.
// The Server's own Check and Highest, for callers in the same process, are
// not checked either.
//
// # HTTP API
//
//	PUT    /v1/objects/{key...}   store the body            200 + JSON ObjectInfo
//	GET    /v1/objects/{key...}   read the body             200, 404
//	DELETE /v1/objects/{key...}   delete                    204, 404
//	POST   /v1/fences/{domain...} raise the domain's bar    200 + JSON FenceInfo
//	GET    /v1/fences/{domain...} read the highest token    200 + JSON FenceInfo (0: none yet)
//	GET    /metrics               Prometheus metrics
//	GET    /healthz               200 once the store serves
//
// # Unsafe mode
//
// Config.DisableFencing (fencelock store --no-fencing) accepts every write
// whatever its token, so that the split-brain demo can show the corruption
// fencing prevents. It logs a warning at startup and marks each answer with
// the header Fencing: disabled. Never use it for data you care about.
package store
