// Package httpfence fences HTTP services: a service of yours becomes a
// fenced resource, and a client sends a held lock's token with every call.
//
// # The contract
//
// One wire contract, which the fenced store ("fencelock store") speaks too:
//
//   - A write (any method but GET, HEAD and OPTIONS) carries the holder's
//     token in a Fencing-Token header (decimal), and may name its fence
//     domain in Fencing-Domain (without it, the service picks one: the
//     store the object key, Handler the path).
//   - A stale token is answered 409 Conflict, a missing one (or 0) 428
//     Precondition Required, a malformed token or domain 400, each with a
//     JSON ErrorBody: {"error": "stale_fencing_token", "message": ...,
//     "domain": ..., "token": ..., "highest": ...}. A refused write changed
//     nothing.
//   - Optionally, fence endpoints (FencesHandler): POST {domain} with a
//     Fencing-Token raises the domain's highest token without writing, GET
//     {domain} reads it; both answer {"domain": ..., "highest": ...}.
//
// # The service side
//
// Handler wraps an http.Handler. It checks the headers and runs the handler
// inside a Guard, so that the token check and the handler's effect commit
// together: with postgres.Fence.Guard the handler writes in the fenced
// transaction (postgres.TxFromContext); with a *fence.Memory, under the
// domain's lock. Without a guard it hands the Write to the handler
// (FromContext), which fences through an adapter itself.
//
// # The client side
//
// Transport is an http.RoundTripper that adds a held lock's token to every
// request and sends nothing once the lease is lost; ResponseError turns an
// answer back into a typed error (*fencelock.StaleTokenError for 409).
// Client is a fence.Resource over the contract: "fencelock conformance"
// drives any service through the shared cases with it.
package httpfence
