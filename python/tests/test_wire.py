"""The client's handling of what crosses the wire, without a real node:
malformed answers become typed errors, and the lease's deadline holds
whatever the renewals do."""

import datetime
import http.server
import json
import threading
import time

import pytest

import fencelock
from fencelock import _wire
from fencelock.client import _Acquisition
from fencelock.lock import Lock


@pytest.mark.parametrize("bad", ["infs", "nans", "-5s", "xs", "5", 5, None, "1e3s"])
def test_malformed_durations_are_unavailable(bad):
    with pytest.raises(fencelock.Unavailable):
        _wire.parse_duration(bad)


@pytest.mark.parametrize("grant", [
    {"token": "0", "leaseId": "a" * 32, "ttl": "5s"},
    {"token": "-1", "leaseId": "a" * 32, "ttl": "5s"},
    {"token": 5.7, "leaseId": "a" * 32, "ttl": "5s"},
    {"token": "5.0", "leaseId": "a" * 32, "ttl": "5s"},
    {"token": str(2**64), "leaseId": "a" * 32, "ttl": "5s"},
    {"token": "5", "leaseId": "short", "ttl": "5s"},
    {"token": "5", "leaseId": "a" * 32, "ttl": "0s"},
    {"token": "5", "leaseId": "a" * 32},
    "not a grant",
])
def test_malformed_grants_are_unavailable(grant):
    with pytest.raises(fencelock.Unavailable):
        _wire.grant({"grant": grant})


def test_a_good_grant_parses():
    assert _wire.grant({"grant": {"token": "18446744073709551615", "leaseId": "a" * 32, "ttl": "1.5s"}}) == \
        (2**64 - 1, "a" * 32, 1.5, "", "")
    assert _wire.grant({"grant": {"token": "7", "leaseId": "a" * 32, "ttl": "1s", "sequencer": "fls1.x", "clusterId": "c"}})[3:] == \
        ("fls1.x", "c")


@pytest.mark.parametrize("body", [b"", b"[]", b'{"details":5}', b'{"details":[5, {"type":"x"}]}',
                                  b'{"code":"unavailable","details":[{"type":"fencelock.v1.ErrorDetail","value":"!!"}]}'])
def test_malformed_error_answers_are_typed(body):
    assert isinstance(_wire.error_from_body(503, body), fencelock.FencelockError)


def test_error_detail_round_trip():
    # A real detail: lock_held, report.pdf, worker-1, token 5, expires 2026-12-01T22:54:18.695462622Z.
    v = "Cglsb2NrX2hlbGQSCnJlcG9ydC5wZGYaCHdvcmtlci0xIAUqDAiaoL3YBhDe1c/LAg"
    e = _wire.error_from_body(409, json.dumps({"code": "already_exists", "message": "held",
                                               "details": [{"type": "fencelock.v1.ErrorDetail", "value": v}]}))
    assert isinstance(e, fencelock.LockHeld)
    expires = datetime.datetime(2026, 12, 1, 22, 54, 18, 695462, tzinfo=datetime.timezone.utc).timestamp()
    assert (e.name, e.holder, e.token) == ("report.pdf", "worker-1", 5)
    assert e.expires == pytest.approx(expires, abs=1e-6)


@pytest.mark.parametrize("e", ["h:abc", "user@h:1", "http://[::1", "ftp://h:1", "http://h:1/path"])
def test_malformed_endpoints_are_invalid_arguments(e):
    with pytest.raises(fencelock.InvalidArgument):
        fencelock.Client([e])


class FakeNode(http.server.BaseHTTPRequestHandler):
    """Answers every call with what the test put in .answer: (status, body)."""

    answer = (200, b"{}")
    calls = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).calls += 1
        status, body = type(self).answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def fake():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeNode)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv, "127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_malformed_success_answers_are_unavailable(fake):
    srv, addr = fake
    c = fencelock.Client([addr], retry_timeout=0.2)
    for body in (b"[1]", b"not json", b'"x"'):
        FakeNode.answer = (200, body)
        with pytest.raises(fencelock.Unavailable):
            c.describe("x")
    FakeNode.answer = (200, b'{"grant":{"token":"0","leaseId":"x"}}')
    with pytest.raises(fencelock.Unavailable):
        c.try_lock("x", ttl=5)


def test_an_answered_unavailable_does_not_silence_the_node(fake):
    srv, addr = fake
    FakeNode.answer = (503, b'{"code":"unavailable","message":"leadership lost"}')
    c = fencelock.Client([addr], retry_timeout=0.2)
    with pytest.raises(fencelock.Unavailable):
        c.describe("x")
    assert c._eps[0].silent_until == 0.0


class HangingClient:
    """A client whose renewals hang (a frozen node) or come back as told."""

    def __init__(self, delay, sequencer="fls1.renewed"):
        self.delay, self.renewals, self.asked, self.sequencer = delay, 0, [], sequencer
        self._mu = threading.Lock()

    def _renew(self, name, lease_id, token, until=None, sequencer=True):
        with self._mu:
            self.renewals += 1
            self.asked.append(sequencer)
        time.sleep(self.delay)
        ans = {"ttl": "2s"}
        if sequencer and self.sequencer:
            ans["sequencer"] = self.sequencer
        return ans

    def _release(self, *a):
        pass


def test_lost_is_set_at_the_deadline_while_a_renewal_hangs():
    c = HangingClient(delay=60)
    start = time.monotonic()
    lk = Lock(c, "x", 5, "a" * 32, ttl=1.5, margin=0.15, start=start)
    assert lk.lost.wait(3), "lost not set while the renewal hung"
    assert time.monotonic() >= start + 1.35 - 0.01 and c.renewals == 1
    assert isinstance(lk.cause, fencelock.LeaseExpired)


def test_a_renewal_confirmed_after_the_deadline_does_not_extend_the_lease():
    c = HangingClient(delay=1.2)  # sent at 0.5 s, confirmed at 1.7 s: after the deadline at 1.35 s
    start = time.monotonic()
    lk = Lock(c, "x", 5, "a" * 32, ttl=1.5, margin=0.15, start=start)
    assert lk.lost.wait(3)
    time.sleep(0.5)  # the late renewal returns
    with pytest.raises(fencelock.LeaseLost):
        lk.check()
    assert lk.deadline == pytest.approx(start + 1.35)


def test_the_first_renewal_counts_from_the_lease_start():
    # A grant answered late (within the margin, so not renewed before use):
    # with the first renewal TTL/3 after the answer, the deadline would pass
    # first, though every renewal succeeds.
    c = HangingClient(delay=0)
    start = time.monotonic() - 0.7
    lk = Lock(c, "x", 5, "a" * 32, ttl=3, margin=1.5, start=start)
    time.sleep(1.2)  # past the deadline without a renewal (start + 1.5 s)
    lk.check()
    assert c.renewals >= 1
    lk.release()


def test_a_renewal_brings_a_new_sequencer():
    c = HangingClient(delay=0)
    lk = Lock(c, "x", 5, "a" * 32, ttl=0.6, margin=0.05, start=time.monotonic())
    lk._take_sequencer("fls1.first", time.monotonic(), asked=True)  # as sequencer=True gives it
    deadline = time.monotonic() + 2
    while lk.sequencer == "fls1.first" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lk.sequencer == "fls1.renewed" and c.asked and all(c.asked)
    lk.release()


def test_renewals_sign_only_once_the_sequencer_is_read():
    c = HangingClient(delay=0)
    lk = Lock(c, "x", 5, "a" * 32, ttl=0.6, margin=0.05, start=time.monotonic())
    lk._take_sequencer("", time.monotonic(), asked=False)  # a grant asked for none
    time.sleep(0.5)  # two renewals
    assert c.renewals >= 2 and not any(c.asked), c.asked
    assert lk._sequencer == ""
    before = c.renewals
    assert lk.sequencer == "fls1.renewed"  # renews to get one
    assert c.renewals == before + 1 and c.asked[-1] is True
    time.sleep(0.3)
    assert c.asked[-1] is True, "after the sequencer was read, renewals did not ask for one"
    lk.release()


def test_readers_of_the_sequencer_share_one_renewal():
    c = HangingClient(delay=0.1)
    lk = Lock(c, "x", 5, "a" * 32, ttl=30, margin=1, start=time.monotonic())  # no keep-alive renewal soon
    got = []
    readers = [threading.Thread(target=lambda: got.append(lk.sequencer)) for _ in range(6)]
    for r in readers:
        r.start()
    for r in readers:
        r.join()
    assert got == ["fls1.renewed"] * 6 and c.renewals == 1, (got, c.renewals)
    lk.release()


def test_a_cluster_that_signs_none_is_asked_once():
    c = HangingClient(delay=0, sequencer="")
    lk = Lock(c, "x", 5, "a" * 32, ttl=30, margin=1, start=time.monotonic())
    assert lk.sequencer == "" and lk.sequencer == "" and c.renewals == 1
    lk.release()


class SlowCancelNode(http.server.BaseHTTPRequestHandler):
    """The first CancelWait answers only after the client's attempt timed
    out (its outcome unknown to the client); the next ones at once."""

    cancels = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).cancels += 1
        if type(self).cancels == 1:
            time.sleep(0.6)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *a):
        pass


def test_a_take_back_whose_outcome_is_unknown_is_retried_until_answered():
    # A new lock() with the request id waits while the take-back is under
    # way; one given up after an unknown attempt could land after its grant.
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowCancelNode)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = fencelock.Client(["127.0.0.1:%d" % srv.server_address[1]], attempt_timeout=0.2, retry_timeout=5)
        rid = c._own_request_id("r")
        _Acquisition(c, "x", 5, None, "h", rid, True, 0.5, False)._abandon(sync=False)
        deadline = time.monotonic() + 5
        while rid in c._take_backs and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rid not in c._take_backs
        assert SlowCancelNode.cancels >= 2, "the take-back was given up with its outcome unknown"
    finally:
        srv.shutdown()
        srv.server_close()
