"""The errors of fencelock, one class per wire code.

Every error the service, the client and the fences raise is a
FencelockError whose ``code`` is the stable wire code the Go packages use
(``lock_held``, ``stale_fencing_token``, ...). Catch the class, not the
message.
"""

from __future__ import annotations


class FencelockError(Exception):
    """Base class of fencelock's errors. ``code`` is the wire code."""

    code = ""

    def __init__(self, message: str = "", **fields):
        super().__init__(message or self.code)
        self.message = message or self.code
        for k, v in fields.items():
            setattr(self, k, v)


class LockHeld(FencelockError):
    """A try-lock, or a wait that ran out, found the lock held.

    ``name``, ``holder`` (the holder's label), ``token`` (its fencing
    token) and ``expires`` (when its lease ends unless renewed, as Unix
    seconds by the service's clock, or None) describe the grant that holds
    it.
    """

    code = "lock_held"
    name = ""
    holder = ""
    token = 0
    expires = None


class NotHolder(FencelockError):
    """Renew or release named a grant that is not the lock's current one."""

    code = "not_holder"


class LeaseExpired(FencelockError):
    """The lease ran out before it was renewed."""

    code = "lease_expired"


class LeaseLost(FencelockError):
    """Raised by ``Lock.check()``: the lease can no longer be trusted.

    ``cause`` is why: a LeaseExpired (no renewal was confirmed within the
    lease), a NotHolder (the service ended the grant) or the string
    "released".
    """

    code = "lease_lost"
    cause = None


class StaleToken(FencelockError):
    """A resource refused a write whose token is below the highest it accepted.

    ``domain`` is the fence domain, ``token`` the token the write carried
    and ``highest`` the highest token the domain had accepted. A newer
    holder exists: do not retry with this token.
    """

    code = "stale_fencing_token"
    domain = ""
    token = 0
    highest = 0


class MissingToken(FencelockError):
    """A write carried no fencing token (or token 0)."""

    code = "missing_fencing_token"


class InvalidToken(FencelockError):
    """A fencing token is not a positive integer in range."""

    code = "invalid_fencing_token"


class InvalidName(FencelockError):
    """A lock name, domain or key is empty, too long or malformed."""

    code = "invalid_name"


class InvalidTTL(FencelockError):
    """A TTL is outside the service's range."""

    code = "invalid_ttl"


class InvalidArgument(FencelockError):
    """Any other malformed request."""

    code = "invalid_argument"


class NotFound(FencelockError):
    """The named lock, object or row does not exist."""

    code = "not_found"


class TooLarge(FencelockError):
    """A request exceeds a size limit."""

    code = "too_large"


class NotLeader(FencelockError):
    """The node is not the Raft leader; ``leader`` is the leader's address, or ""."""

    code = "not_leader"
    leader = ""


class Unavailable(FencelockError):
    """The outcome is unknown (no answer, leadership lost, shutting down).

    Retrying with the same request id is safe; the client already did
    until its retry timeout ran out.
    """

    code = "unavailable"


class PreconditionFailed(FencelockError):
    """A conditional write's precondition (If-Match) did not hold."""

    code = "precondition_failed"


class Unauthenticated(FencelockError):
    """A call without valid credentials."""

    code = "unauthenticated"


class TokensExhausted(FencelockError):
    """The cluster reached the last fencing token it can issue."""

    code = "tokens_exhausted"


class InvalidSequencer(FencelockError):
    """A sequencer that does not prove a grant of this cluster."""

    code = "invalid_sequencer"


class PermissionDenied(FencelockError):
    """The cluster's policy does not grant this caller the call on that lock."""

    code = "permission_denied"


class ResourceExhausted(FencelockError):
    """A limit of the service, such as the waiters a lock may have."""

    code = "resource_exhausted"


BY_CODE = {
    cls.code: cls
    for cls in (
        LockHeld,
        NotHolder,
        LeaseExpired,
        StaleToken,
        MissingToken,
        InvalidToken,
        InvalidName,
        InvalidTTL,
        InvalidArgument,
        NotFound,
        TooLarge,
        NotLeader,
        Unavailable,
        PreconditionFailed,
        Unauthenticated,
        TokensExhausted,
        InvalidSequencer,
        PermissionDenied,
        ResourceExhausted,
    )
}


def from_code(code: str, message: str, **fields) -> FencelockError:
    """Returns the error of wire code ``code``; a FencelockError if unknown."""
    cls = BY_CODE.get(code)
    if cls is None:
        err = FencelockError(message, **fields)
        err.code = code
        return err
    return cls(message, **fields)
