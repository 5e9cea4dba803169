"""fencelock: distributed locks with fencing tokens, end to end.

    from fencelock import Client

    client = Client(["127.0.0.1:7070"])
    with client.lock("order:42", ttl=10) as lock:
        pay(order=42, token=lock.token)   # the resource refuses stale tokens

The client needs only the standard library. Fences for resources are in
fencelock.postgres (psycopg 3 and psycopg2), fencelock.redis (redis-py) and
fencelock.store (the fenced object store).
"""

from .client import Client, Lock
from .errors import (
    FencelockError,
    InvalidArgument,
    InvalidName,
    InvalidToken,
    InvalidTTL,
    LeaseExpired,
    LeaseLost,
    LockHeld,
    MissingToken,
    NotFound,
    NotHolder,
    NotLeader,
    PreconditionFailed,
    StaleToken,
    InvalidSequencer,
    PermissionDenied,
    ResourceExhausted,
    TokensExhausted,
    TooLarge,
    Unauthenticated,
    Unavailable,
)

__all__ = [
    "Client",
    "Lock",
    "FencelockError",
    "InvalidArgument",
    "InvalidName",
    "InvalidToken",
    "InvalidTTL",
    "LeaseExpired",
    "LeaseLost",
    "LockHeld",
    "MissingToken",
    "NotFound",
    "NotHolder",
    "NotLeader",
    "PreconditionFailed",
    "StaleToken",
    "InvalidSequencer",
    "PermissionDenied",
    "ResourceExhausted",
    "TokensExhausted",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
]
