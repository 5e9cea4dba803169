"""A held lock: its token, and a lease kept alive on a thread."""

from __future__ import annotations

import logging
import threading
import time

from . import errors

log = logging.getLogger("fencelock")


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
        self._start = start  # the first renewal is due TTL/3 after it
        self._sequencer = ""
        self._seq_until = 0.0  # time.monotonic() until which _sequencer covers the lease
        self._seq_wanted = False  # sequencer=True, or sequencer was read: renewals ask for one
        self._unsigned = False  # the node signed none when asked: the cluster has no key
        self._renewing = threading.Lock()  # readers of sequencer share one renewal
        self.cluster_id = ""
        self._released = threading.Event()
        self._thread = threading.Thread(target=self._keep_alive, name="fencelock-renew " + name, daemon=True)
        self._thread.start()

    @property
    def sequencer(self) -> str:
        """The grant's latest signed proof, for resources that verify one: the
        grant's, then each renewal's, valid until the lease it came with ends.

        The node signs them only for holders that ask: the grant brings one
        with ``lock(..., sequencer=True)``, renewals once this was read. So
        the first read without a proof covering the lease renews the lease
        to get one (a round trip; readers meanwhile share it). "" if the
        cluster signs none, or no proof covering the lease could be had.
        """
        with self._mu:
            self._seq_wanted = True
            if self._unsigned or time.monotonic() < self._seq_until:
                return self._current_sequencer()
        with self._renewing:
            with self._mu:
                fresh = self._unsigned or time.monotonic() < self._seq_until
            if not fresh and not self.lost.is_set():
                start = time.monotonic()
                try:
                    ans = self.client._renew(self.name, self.lease_id, self.token, until=self.deadline)
                except (errors.NotHolder, errors.LeaseExpired) as e:
                    self._lose(e)
                except errors.FencelockError:
                    pass  # no proof to be had now
                else:
                    self._extend(start + self.ttl - self.margin)
                    self._take_sequencer(ans.get("sequencer"), start, asked=True)
        with self._mu:
            return self._current_sequencer()

    def _current_sequencer(self):
        """The sequencer if it still covers the lease, else ""; _mu held."""
        return self._sequencer if time.monotonic() < self._seq_until else ""

    def _take_sequencer(self, seq, start, asked):
        """Keeps seq, brought by a call made at start (monotonic), if any;
        asked: the call asked for one."""
        with self._mu:
            if asked:
                self._seq_wanted = True
            if isinstance(seq, str) and seq:
                self._sequencer, self._seq_until, self._unsigned = seq, start + self.ttl - self.margin, False
            elif asked:
                self._unsigned = True

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
            self._expire()
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

    def _expire(self):
        self._lose(errors.LeaseExpired("lock %r token %d: no renewal confirmed within the lease"
                                       % (self.name, self.token)))

    def _keep_alive(self):
        """Renews every TTL/3 and sets lost at the deadline. A renewal runs
        on a thread of its own, so that a call that hangs cannot hold up the
        deadline."""
        interval = self.ttl / 3
        due = self._start + interval  # from the lease's start, not now: the grant may have come late
        try:
            while not self.lost.is_set():
                if self._released.wait(max(0.0, min(due, self.deadline) - time.monotonic())):
                    return
                if time.monotonic() >= self.deadline:
                    self._expire()
                elif time.monotonic() >= due:
                    due = self._renew_once(interval)
        except BaseException as e:  # never die with the lease looking alive
            self._lose(errors.LeaseExpired("keep-alive failed: %r" % e))
            raise

    def _renew_once(self, interval):
        """Renews once; returns when the next renewal is due."""
        start = time.monotonic()
        done, out = threading.Event(), []

        with self._mu:
            asked = self._seq_wanted

        def renew():
            try:
                ans = self.client._renew(self.name, self.lease_id, self.token, until=self.deadline, sequencer=asked)
                self._take_sequencer(ans.get("sequencer"), start, asked)
                out.append(None)
            except BaseException as e:  # handed to the keep-alive thread
                out.append(e)
            done.set()

        threading.Thread(target=renew, name="fencelock-renew-call " + self.name, daemon=True).start()
        while not done.wait(max(0.0, self.deadline - time.monotonic())):
            if time.monotonic() >= self.deadline:
                self._expire()
                return start + interval
        err = out[0]
        if isinstance(err, (errors.NotHolder, errors.LeaseExpired)):
            self._lose(err)
        elif err is not None and not self._released.is_set():
            log.warning("renew failed; retrying: lock=%s token=%d err=%s", self.name, self.token, err)
            return time.monotonic() + max(interval / 4, 0.01)
        elif err is None:
            self._extend(start + self.ttl - self.margin)
        return start + interval

    def _extend(self, deadline):
        with self._mu:
            # A renewal confirmed after the deadline passed comes too late:
            # another holder may have been granted meanwhile.
            if self.lost.is_set() or time.monotonic() >= self._deadline:
                return
            self._deadline = max(self._deadline, deadline)

    def release(self) -> None:
        """Stops the renewals, sets ``lost`` and releases the grant.

        Raises NotHolder if the grant had already ended (the lease was lost).
        """
        held = not self.lost.is_set() and time.monotonic() < self.deadline
        self._released.set()  # a renewal under way is harmless: it renews nothing after the release
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
