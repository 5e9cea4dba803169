"""The lock client: leases with fencing tokens, kept alive on a thread."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time

from . import _wire, errors

log = logging.getLogger("fencelock")
log.addHandler(logging.NullHandler())

MIN_CALL = 0.05  # a waiting call a node ends sooner is followed by a pause this long


def default_holder() -> str:
    return "%s/%d" % (socket.gethostname(), os.getpid())


class Client:
    """A client of a fencelock service; safe to share among threads.

    ``endpoints`` are the nodes' API addresses, as ``host:port`` or URLs.
    The client follows the leader, retries a call whose outcome is unknown
    (every call is safe to repeat: an acquire carries a request id) for up
    to ``retry_timeout`` seconds, and skips a node that did not answer for
    ``silent_for`` seconds. One attempt on one node may take
    ``attempt_timeout`` seconds (plus the wait, for a queued acquire). A
    queued acquire waits in calls of at most ``wait_chunk`` seconds and
    keeps its place in the queue between them, so a node that freezes
    while it waits is left within wait_chunk + attempt_timeout.
    """

    def __init__(
        self,
        endpoints,
        *,
        holder: str | None = None,
        attempt_timeout: float = 2.0,
        wait_chunk: float = 2.0,
        dial_timeout: float = 1.0,
        retry_timeout: float = 30.0,
        retry_backoff: float = 0.02,
        max_retry_backoff: float = 0.25,
        silent_for: float = 2.0,
    ):
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if not endpoints or any(not str(e).strip() for e in endpoints):
            raise errors.InvalidArgument("client: need at least one non-empty endpoint")
        self.holder = holder if holder is not None else default_holder()
        if min(attempt_timeout, wait_chunk, dial_timeout, retry_timeout, retry_backoff) <= 0 \
                or max_retry_backoff < retry_backoff or silent_for < 0:
            raise errors.InvalidArgument("client: timeouts and backoffs must be positive")
        self.attempt_timeout = attempt_timeout
        self.wait_chunk = wait_chunk
        self.retry_timeout = retry_timeout
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.silent_for = silent_for
        self._dial_timeout = dial_timeout
        self._eps = [_wire.Endpoint(_wire.endpoint_url(e), dial_timeout) for e in endpoints]
        self._mu = threading.Lock()
        self._next = 0

    def close(self):
        """Closes idle connections. Held locks are not released."""
        for ep in self._eps:
            ep.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Locks.

    def lock(self, name: str, ttl: float = 10.0, *, wait: float | None = None, holder: str | None = None,
             request_id: str | None = None, margin: float | None = None) -> "Lock":
        """Takes the lock, waiting in FIFO order while it is held.

        ``wait`` bounds the wait in seconds (None: until granted; 0: a
        try-lock). Returns a held Lock, kept alive until release; use it as
        ``with client.lock(...) as lock:`` to release on exit. Raises
        LockHeld when the wait runs out, InvalidName, InvalidTTL,
        InvalidArgument, NotHolder (the request's grant ended before its
        answer arrived), or Unavailable. An acquire that gives up (an
        exception, KeyboardInterrupt) takes back what its request left on
        the service: its place in the queue, or its grant.
        """
        margin = _margin(ttl, margin)
        if wait is not None and wait < 0:
            raise errors.InvalidArgument("wait %r is negative" % wait)
        own_id = request_id is not None
        rid = request_id if own_id else secrets.token_hex(16)
        return _Acquisition(self, name, ttl, wait, holder if holder is not None else self.holder,
                            rid, own_id, margin).run()

    def try_lock(self, name: str, ttl: float = 10.0, **kw) -> "Lock":
        """Takes the lock if it is free; raises LockHeld otherwise."""
        return self.lock(name, ttl, wait=0, **kw)

    def renew(self, name: str, lease_id: str, token: int, *, until: float | None = None) -> float:
        """Extends a grant's lease by its TTL; returns the TTL in seconds.

        A Lock renews itself; this is for a grant held across processes.
        Raises NotHolder, LeaseExpired or Unavailable.
        """
        ans = self.call("Renew", {"name": name, "leaseId": lease_id, "token": str(token)}, until=until)
        return _wire.parse_duration(ans.get("ttl", "0s"))

    def release(self, name: str, lease_id: str, token: int) -> None:
        """Ends a grant; the next waiter is granted at once. Raises NotHolder."""
        self._release(name, lease_id, token, held=True)

    def _release(self, name, lease_id, token, held):
        unknown = []

        def note(e):
            if isinstance(e, errors.Unavailable):
                unknown.append(e)

        try:
            self.call("Release", {"name": name, "leaseId": lease_id, "token": str(token)}, on_retry=note)
        except errors.NotHolder:
            # An attempt whose answer was lost may have released it.
            if not (unknown and held):
                raise

    def cancel_wait(self, name: str, request_id: str) -> None:
        """Takes a request out of the lock's queue, or ends the grant it got."""
        self.call("CancelWait", {"name": name, "requestId": request_id})

    def describe(self, name: str) -> dict:
        """Returns the lock's holder, token, expiry and waiters (JSON form). Raises NotFound."""
        return self.call("Describe", {"name": name}).get("lock", {})

    def list(self, prefix: str = ""):
        """Yields the locks whose names start with prefix, in name order."""
        page = ""
        while True:
            ans = self.call("List", {"prefix": prefix, "pageToken": page})
            yield from ans.get("locks", [])
            page = ans.get("nextPageToken", "")
            if not page:
                return

    # Calls.

    def call(self, method: str, body: dict, *, extra: float = 0.0, until: float | None = None,
             on_retry=None) -> dict:
        """Calls a LockService method until it succeeds or fails for good.

        It rotates on NotLeader and Unavailable with backoff, jumps to the
        leader a follower names (unless that node is silent), and gives up
        ``retry_timeout`` seconds after the first failure, or at ``until``
        (a time.monotonic() instant). Each attempt may take
        attempt_timeout + extra seconds.
        """
        backoff = self.retry_backoff
        give_up = None
        attempt = 0
        while True:
            ep, i = self._pick()
            limit = self.attempt_timeout + extra
            if until is not None:
                limit = min(limit, until - time.monotonic())
                if limit <= 0:
                    raise errors.Unavailable("%s: no answer before the deadline" % method)
            try:
                return ep.post(method, body, limit)
            except (errors.NotLeader, errors.Unavailable) as e:
                err = e
            if on_retry:
                on_retry(err)
            if isinstance(err, errors.Unavailable):
                ep.silent_until = time.monotonic() + self.silent_for
            now = time.monotonic()
            give_up = give_up or now + self.retry_timeout
            if now >= give_up or (until is not None and now >= until):
                raise err
            log.debug("call failed; retrying: endpoint=%s attempt=%d err=%s", ep.host, attempt + 1, err)
            if not self._follow(err, i):
                if attempt % len(self._eps) == len(self._eps) - 1:
                    time.sleep(backoff if until is None else max(0.0, min(backoff, until - time.monotonic())))
                    backoff = min(2 * backoff, self.max_retry_backoff)
            attempt += 1

    def _pick(self):
        with self._mu:
            eps, start = list(self._eps), self._next % len(self._eps)
        now = time.monotonic()
        for k in range(len(eps)):
            i = (start + k) % len(eps)
            if eps[i].silent_until <= now:
                return eps[i], i
        return eps[start], start

    def _follow(self, err, i) -> bool:
        """Moves the next attempt to the named leader, or on; True if it followed a hint."""
        leader = getattr(err, "leader", "")
        with self._mu:
            if leader:
                j = next((k for k, ep in enumerate(self._eps) if ep.host == leader), None)
                if j is None:
                    self._eps.append(_wire.Endpoint("http://" + leader, self._dial_timeout))
                    j = len(self._eps) - 1
                if j != i and self._eps[j].silent_until <= time.monotonic():
                    self._next = j
                    return True
            if self._next % len(self._eps) == i:
                self._next = (i + 1) % len(self._eps)
        return False


def _margin(ttl, margin):
    if ttl <= 0:
        raise errors.InvalidTTL("ttl %r is not positive" % ttl)
    if margin is None:
        margin = max(ttl / 10, 0.05)
        if 3 * margin >= 2 * ttl:
            raise errors.InvalidTTL("ttl %r is too short for the default safety margin %r" % (ttl, margin))
    if margin <= 0 or 3 * margin >= 2 * ttl:
        raise errors.InvalidArgument(
            "safety margin %r must be positive and below 2/3 of ttl %r (the lease would end before its first renewal)"
            % (margin, ttl))
    return margin


class _Acquisition:
    """One acquire: a request id, and calls with it until granted or over."""

    def __init__(self, c, name, ttl, wait, holder, rid, own_id, margin):
        self.c, self.name, self.ttl, self.holder = c, name, ttl, holder
        self.rid, self.own_id, self.margin = rid, own_id, margin
        self.first = time.monotonic()
        self.end = None if wait is None else self.first + wait

    def run(self) -> "Lock":
        try:
            while True:
                wait, last = self._next_wait()
                called = time.monotonic()
                try:
                    grant = self._send(wait, keep_place=not last and wait > 0)
                except errors.LockHeld:
                    if self.end is not None and time.monotonic() >= self.end:
                        raise
                    # The node ended this call at its max wait, keeping the
                    # request's place: the next call resumes it.
                    time.sleep(max(0.0, MIN_CALL - (time.monotonic() - called)))
                    continue
                return self._granted(grant)
        except (errors.NotLeader, errors.Unavailable, KeyboardInterrupt, SystemExit):
            self._abandon()
            raise

    def _next_wait(self):
        chunk = self.c.wait_chunk
        if self.end is None:
            return chunk, False
        left = max(self.end - time.monotonic(), 0.0)
        return min(left, chunk), left <= chunk

    def _send(self, wait, keep_place):
        body = {"name": self.name, "ttl": _wire.duration(self.ttl), "wait": _wire.duration(wait),
                "requestId": self.rid, "holder": self.holder, "keepPlace": keep_place}
        ans = self.c.call("Acquire", body, extra=wait)
        g = ans.get("grant") or {}
        if not g.get("token") or not g.get("leaseId"):
            raise errors.Unavailable("service returned no grant")
        return g

    def _granted(self, g) -> "Lock":
        """A grant that may be older than this acquire (a wait, a retry, the
        caller's own request id) is renewed first, so that the lease counts
        from a known instant."""
        start = self.first
        token, lease = int(g["token"]), g["leaseId"]
        if self.own_id or time.monotonic() - start > self.margin:
            now = time.monotonic()
            try:
                self.c.renew(self.name, lease, token)
                start = now
            except errors.Unavailable:
                if self.own_id:
                    raise  # no known start for the lease: give up, and take the grant back
        return Lock(self.c, self.name, token, lease, _wire.parse_duration(g.get("ttl", "0s")), self.margin, start)

    def _abandon(self):
        def take_back():
            try:
                self.c.cancel_wait(self.name, self.rid)
            except errors.FencelockError as e:
                log.debug("could not take back an abandoned acquire of %s (the service does within seconds): %s",
                          self.name, e)

        threading.Thread(target=take_back, name="fencelock-take-back", daemon=True).start()


class Lock:
    """A held grant: its fencing token, and a lease kept alive on a thread.

    ``token`` is the fencing token: send it with every write to the
    resource. ``lost`` is a threading.Event set the moment the lease can no
    longer be trusted: when no renewal was confirmed by (start of the last
    confirmed renewal + TTL - margin, on time.monotonic()), when the service
    ends the grant, or on release. ``check()`` raises LeaseLost then.
    """

    def __init__(self, c, name, token, lease_id, ttl, margin, start):
        self.client, self.name, self.token, self.lease_id, self.ttl = c, name, token, lease_id, ttl
        self.margin = margin
        self.lost = threading.Event()
        self.cause = None
        self._mu = threading.Lock()
        self._deadline = start + ttl - margin
        self._released = threading.Event()
        self._thread = threading.Thread(target=self._keep_alive, name="fencelock-renew " + name, daemon=True)
        self._thread.start()

    @property
    def deadline(self) -> float:
        """The time.monotonic() instant the lease ends unless renewed first."""
        with self._mu:
            return self._deadline

    def check(self) -> None:
        """Raises LeaseLost if the lease can no longer be trusted.

        It reads the clock itself: after a pause of the process (SIGSTOP,
        a descheduled VM) it is right before the keep-alive thread runs.
        """
        if not self.lost.is_set() and time.monotonic() >= self.deadline:
            self._lose(errors.LeaseExpired("lock %r token %d: no renewal confirmed within the lease"
                                           % (self.name, self.token)))
        if self.lost.is_set():
            raise errors.LeaseLost("lock %r token %d: lease lost: %s" % (self.name, self.token, self.cause),
                                   cause=self.cause)

    def _lose(self, cause):
        with self._mu:
            if self.lost.is_set():
                return
            self.cause = cause
            self.lost.set()
        if cause != "released":
            log.warning("lease lost: lock=%s token=%d cause=%s", self.name, self.token, cause)

    def _keep_alive(self):
        interval = self.ttl / 3
        due = time.monotonic() + interval
        while True:
            timeout = min(due, self.deadline) - time.monotonic()
            if self._released.wait(max(timeout, 0)):
                return
            now = time.monotonic()
            if now >= self.deadline:
                self._expire()
                return
            if now < due:
                continue
            due = self._renew_once(interval)
            if due is None:
                return

    def _expire(self):
        try:
            self.check()
        except errors.LeaseLost:
            pass

    def _renew_once(self, interval):
        """Renews once; returns when the next renewal is due, or None when the lock ended."""
        start = time.monotonic()
        try:
            self.client.renew(self.name, self.lease_id, self.token, until=self.deadline)
        except (errors.NotHolder, errors.LeaseExpired) as e:
            self._lose(e)
            return None
        except errors.FencelockError as e:
            if self._released.is_set():
                return None
            log.warning("renew failed; retrying: lock=%s token=%d err=%s", self.name, self.token, e)
            return time.monotonic() + max(interval / 4, 0.01)
        with self._mu:
            if not self.lost.is_set():
                self._deadline = max(self._deadline, start + self.ttl - self.margin)
        return start + interval

    def release(self) -> None:
        """Stops the renewals, sets ``lost`` and releases the grant.

        Raises NotHolder if the grant had already ended (the lease was lost).
        """
        held = not self.lost.is_set() and time.monotonic() < self.deadline
        self._released.set()  # no renewal starts after this; one under way is harmless
        self._lose("released")
        self.client._release(self.name, self.lease_id, self.token, held)

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, typ, exc, tb):
        lost_before = self.lost.is_set() or time.monotonic() >= self.deadline
        try:
            self.release()
        except errors.FencelockError as e:
            if typ is None and not (lost_before and isinstance(e, errors.NotHolder)):
                log.warning("release of %s failed: %s", self.name, e)
        return False

    def __repr__(self):
        return "Lock(name=%r, token=%d, lost=%s)" % (self.name, self.token, self.lost.is_set())
