"""Checks every fence makes before it writes, as the Go fences do."""

from __future__ import annotations

import unicodedata

from .errors import InvalidName, InvalidToken, MissingToken

MAX_DOMAIN_BYTES = 1024
MAX_TOKEN = 2**64 - 1


def domain(d) -> str:
    """Returns d if it is a valid fence domain; raises InvalidName otherwise.

    A domain is non-empty UTF-8 of at most 1,024 bytes, without control
    characters or white space at either end.
    """
    if not isinstance(d, str) or not d or d.strip() != d \
            or any(unicodedata.category(ch) in ("Cc", "Cs") for ch in d) \
            or len(d.encode("utf-8")) > MAX_DOMAIN_BYTES:
        raise InvalidName("fence domain %r is empty, too long, has control characters "
                          "or begins or ends with white space" % (d,))
    return d


def token(t, what: str, limit: int = MAX_TOKEN) -> int:
    """Returns t if it is a token a write may carry; raises otherwise."""
    if t is None or t == 0 and not isinstance(t, bool):
        raise MissingToken("the write to %s has no fencing token" % what)
    if isinstance(t, bool) or not isinstance(t, int) or t < 0 or t > limit:
        raise InvalidToken("token %r for %s is not an integer in 1..%d" % (t, what, limit))
    return t
