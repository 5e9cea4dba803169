// Package conformance holds the cases every fenced resource must pass, as
// one definition of fencing: 33 then 34 accepted, 34 then 33 refused with a
// *fencelock.StaleTokenError and nothing stored, equal tokens accepted, token
// 0 refused, a domain fences every key in it, domains are independent, a
// fence raise refuses lower writes, the highest token survives a restart,
// and 50 concurrent writers with random tokens never make a stored value go
// back to an older token.
//
// The cases drive a fence.Resource. Go tests run them with
// fencelocktest.RunFenceSuite; Run runs them outside a test, as "fencelock
// conformance" does against an HTTP resource.
package conformance
