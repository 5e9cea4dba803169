"""The lock client: leases with fencing tokens, kept alive on a thread."""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import threading
import time

from . import _wire, errors
from .lock import Lock

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
        # Scopes the caller's own request ids to this Client (_own_request_id).
        self._instance = secrets.token_hex(8)
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
        self._take_backs = {}  # request id -> the Events of its take-backs under way, each set when it ends

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
             request_id: str | None = None, margin: float | None = None, sequencer: bool = False) -> "Lock":
        """Takes the lock, waiting in FIFO order while it is held.

        ``wait`` bounds the wait in seconds (None: until granted; 0: a
        try-lock). Returns a held Lock, kept alive until release; use it as
        ``with client.lock(...) as lock:`` to release on exit. Raises
        LockHeld when the wait runs out, InvalidName, InvalidTTL,
        InvalidArgument, NotHolder (the request's grant ended before its
        answer arrived), or Unavailable. An acquire that gives up (an
        exception, KeyboardInterrupt) takes back what its request left on
        the service: its place in the queue, or its grant. ``sequencer``:
        the grant brings its signed proof (Lock.sequencer) at once, and
        renewals new ones; without it the node signs none until
        Lock.sequencer is first read.
        """
        margin = _margin(ttl, margin)
        if wait is not None and wait < 0:
            raise errors.InvalidArgument("wait %r is negative" % wait)
        own_id = request_id is not None
        rid = self._own_request_id(request_id) if own_id else secrets.token_hex(16)
        if own_id:
            # A take-back of an earlier acquire with this id still under
            # way could end the grant this one gets.
            while True:
                with self._mu:
                    pending = list(self._take_backs.get(rid, ()))
                if not pending:
                    break
                for done in pending:
                    done.wait()
        return _Acquisition(self, name, ttl, wait, holder if holder is not None else self.holder,
                            rid, own_id, margin, sequencer).run()

    def try_lock(self, name: str, ttl: float = 10.0, **kw) -> "Lock":
        """Takes the lock if it is free; raises LockHeld otherwise."""
        return self.lock(name, ttl, wait=0, **kw)

    def renew(self, name: str, lease_id: str, token: int, *, until: float | None = None) -> float:
        """Extends a grant's lease by its TTL; returns the TTL in seconds.

        A Lock renews itself; this is for a grant held across processes.
        Raises NotHolder, LeaseExpired or Unavailable.
        """
        return _wire.parse_duration(self._renew(name, lease_id, token, until).get("ttl"))

    def _renew(self, name, lease_id, token, until=None, sequencer=True) -> dict:
        """Renew's answer: its ttl, and a new sequencer if asked for."""
        body = {"name": name, "leaseId": lease_id, "token": str(token)}
        if not sequencer:
            body["noSequencer"] = True
        return self.call("Renew", body, until=until)

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

    def _own_request_id(self, request_id: str) -> str:
        """The request id sent for the caller's ``request_id``: this Client's
        instance and a hash of it, so that another Client (another process)
        with the same id makes a request of its own."""
        if not isinstance(request_id, str) or not request_id or "\x00" in request_id \
                or len(request_id.encode("utf-8")) > 128:
            raise errors.InvalidArgument("request id must be non-empty UTF-8 of at most 128 bytes with no zero byte")
        return self._instance + ":" + hashlib.sha256(request_id.encode("utf-8")).hexdigest()[:32]

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
            page, prev = ans.get("nextPageToken", ""), page
            if not page:
                return
            if page == prev:
                raise errors.Unavailable("list: the service repeated page token %r" % page)

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
            limit = full = self.attempt_timeout + extra
            if until is not None:
                limit = min(limit, until - time.monotonic())
                if limit <= 0:
                    raise errors.Unavailable("%s: no answer before the deadline" % method)
            try:
                return ep.post(method, body, limit, on_unknown=on_retry)
            except (errors.NotLeader, errors.Unavailable) as e:
                err = e
            if on_retry:
                on_retry(err)
            if getattr(err, "no_answer", False) and limit == full:
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
            j = next((k for k, ep in enumerate(self._eps) if ep.host == leader), None) if leader else None
            if leader and j is None:
                try:
                    self._eps.append(_wire.Endpoint("http://" + leader, self._dial_timeout))
                    j = len(self._eps) - 1
                except errors.InvalidArgument:
                    log.debug("ignoring a malformed leader hint %r", leader)
            if j is not None:
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

    def __init__(self, c, name, ttl, wait, holder, rid, own_id, margin, sequencer):
        self.c, self.name, self.ttl, self.holder = c, name, ttl, holder
        self.rid, self.own_id, self.margin, self.sequencer = rid, own_id, margin, sequencer
        self.first = time.monotonic()
        self.end = None if wait is None else self.first + wait

    def run(self) -> "Lock":
        try:
            while True:
                wait, last = self._next_wait()
                keep = not last and wait > 0
                called = time.monotonic()
                try:
                    grant = self._send(wait, keep_place=keep)
                except errors.LockHeld:
                    if self.end is not None and time.monotonic() >= self.end:
                        if keep:  # its place is kept for a call that will not come
                            self._abandon(sync=False)
                        raise
                    # The node ended this call at its max wait, keeping the
                    # request's place: the next call resumes it.
                    time.sleep(max(0.0, MIN_CALL - (time.monotonic() - called)))
                    continue
                return self._granted(grant)
        except _REFUSED:
            raise  # the service said no: nothing of the request is left on it
        except BaseException as e:
            # The outcome is unknown (or the caller gave up): take back a
            # place or a grant the request may hold. On the way out of the
            # program, before the interpreter ends.
            self._abandon(sync=isinstance(e, (KeyboardInterrupt, SystemExit)))
            raise

    def _next_wait(self):
        chunk = self.c.wait_chunk
        if self.end is None:
            return chunk, False
        left = max(self.end - time.monotonic(), 0.0)
        return min(left, chunk), left <= chunk

    def _send(self, wait, keep_place):
        body = {"name": self.name, "ttl": _wire.duration(self.ttl), "wait": _wire.duration(wait),
                "requestId": self.rid, "holder": self.holder, "keepPlace": keep_place,
                "noSequencer": not self.sequencer}
        return _wire.grant(self.c.call("Acquire", body, extra=wait))

    def _granted(self, g) -> "Lock":
        """A grant that may be older than this acquire (a wait, a retry, the
        caller's own request id) is renewed first, so that the lease counts
        from a known instant."""
        start = seq_start = self.first
        token, lease, ttl, seq, cluster = g
        if self.own_id or time.monotonic() - start > self.margin:
            now = time.monotonic()
            try:
                # A grant found by the caller's own request id may be older
                # than this acquire: its sequencer is replaced.
                ans = self.c._renew(self.name, lease, token, sequencer=self.own_id and self.sequencer)
                start = now
                if isinstance(ans.get("sequencer"), str) and ans["sequencer"]:
                    seq, seq_start = ans["sequencer"], now
            except (errors.NotHolder, errors.LeaseExpired):
                raise
            except errors.FencelockError:
                if self.own_id:
                    raise  # no known start for the lease: give up, and take the grant back
        lock = Lock(self.c, self.name, token, lease, ttl, self.margin, start)
        lock.cluster_id = cluster
        lock._take_sequencer(seq, seq_start, asked=self.sequencer)
        return lock

    def _abandon(self, sync):
        """Takes back what the request left: its place, or its grant. The
        node does so by itself a few seconds after the request's last call
        ended; this is sooner, and also ends a grant whose answer was lost.
        In the background it is retried until a node answers (up to
        retry_timeout): an attempt whose outcome is unknown may still land,
        and a new lock() with the same request id waits for the answer, or
        the late one could end its grant. In sync (the process is ending) it
        gets one attempt's time."""
        c, done = self.c, threading.Event()
        with c._mu:
            c._take_backs.setdefault(self.rid, []).append(done)

        def take_back():
            try:
                c.call("CancelWait", {"name": self.name, "requestId": self.rid},
                       until=time.monotonic() + c.attempt_timeout if sync else None)
            except errors.FencelockError as e:
                if e.code != "not_found":
                    log.debug("could not take back an abandoned acquire of %s (the node does within seconds): %s",
                              self.name, e)
            finally:
                with c._mu:
                    left = c._take_backs.get(self.rid, [])
                    if done in left:
                        left.remove(done)
                    if not left:
                        c._take_backs.pop(self.rid, None)
                done.set()

        if sync:
            take_back()
        else:
            threading.Thread(target=take_back, name="fencelock-take-back", daemon=True).start()


# Answers that leave nothing of an acquire's request on the service.
_REFUSED = (errors.LockHeld, errors.NotHolder, errors.LeaseExpired, errors.InvalidName, errors.InvalidTTL,
            errors.InvalidArgument)
