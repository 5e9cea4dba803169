"""Fenced writes to Redis with redis-py.

The same Lua script as the Go package (github.com/fencelock/fencelock/redis)
checks the domain's highest token and writes in one step on the server, so
Go and Python workers can share a domain. The highest token of a domain is
kept at ``prefix + "{" + domain + "}"``; keys a write touches should share
the domain's hash tag on a Redis Cluster.

    fence = Fence(redis.Redis())
    fence.set("order:42", lock.token, "order:42:status", "paid")

A stale token raises StaleToken and writes nothing.
"""

from __future__ import annotations

import importlib.resources
import math

from . import _fence
from .errors import FencelockError, InvalidArgument, StaleToken

DEFAULT_KEY_PREFIX = "fencelock:fence:"

_SCRIPT = importlib.resources.files(__package__).joinpath("fence.lua").read_text()


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Fence:
    """Fenced writes through a redis.Redis (or redis.RedisCluster) client."""

    def __init__(self, client, prefix: str = DEFAULT_KEY_PREFIX):
        self._r = client
        self.prefix = prefix
        self._script = client.register_script(_SCRIPT)
        self._read_highest = client.register_script("return redis.call('GET', KEYS[1])")

    def fence_key(self, domain: str) -> str:
        """The key holding domain's highest token."""
        return self.prefix + "{" + domain + "}"

    def _run(self, domain, token, op, keys, args=()):
        _fence.domain(domain)
        fk = self.fence_key(domain)
        for k in keys:
            if not isinstance(k, str):
                raise InvalidArgument("key %r is not a string" % (k,))
            if k == fk or (self.prefix and k.startswith(self.prefix)):
                raise InvalidArgument("key %r is a fence key (prefix %r), which fenced writes may not touch"
                                      % (k, self.prefix))
        _fence.token(token, "domain %r" % domain)
        res = self._script(keys=[fk, *keys], args=[str(token), op, *args])
        if len(res) != 2:
            raise FencelockError("fenced %s: script returned %r" % (op, res))
        if int(res[0]) == 1:
            return
        highest = int(_text(res[1]))
        raise StaleToken("stale fencing token %d for domain %r: highest accepted is %d" % (token, domain, highest),
                         domain=domain, token=token, highest=highest)

    def set(self, domain: str, token: int, key: str, value, px: float = 0) -> None:
        """Sets key to value (expiring after px milliseconds unless 0), fenced by token in domain."""
        if px < 0:
            raise InvalidArgument("negative expiration %r" % px)
        self._run(domain, token, "set", [key], [value, math.ceil(px)])

    def hset(self, domain: str, token: int, key: str, fields: dict) -> None:
        """Sets fields of the hash at key, fenced by token in domain."""
        if not fields:
            raise InvalidArgument("fenced hset of %r: no fields" % key)
        args = []
        for name in sorted(fields):
            args += [name, fields[name]]
        self._run(domain, token, "hset", [key], args)

    def delete(self, domain: str, token: int, *keys: str) -> None:
        """Deletes keys, fenced by token in domain."""
        if not keys:
            raise InvalidArgument("fenced delete: no keys")
        self._run(domain, token, "del", list(keys))

    def check(self, domain: str, token: int) -> None:
        """Raises domain's highest token to token, writing nothing else."""
        self._run(domain, token, "check", [])

    def highest(self, domain: str) -> int:
        """The highest token domain has accepted, or 0."""
        _fence.domain(domain)
        v = self._read_highest(keys=[self.fence_key(domain)])  # a script: on the primary, as the writes
        return int(_text(v)) if v is not None else 0
