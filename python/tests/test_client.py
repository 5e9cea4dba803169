"""The client against a real node: grants, waits, keep-alive, errors, loss."""

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

import fencelock
from fencelock import Client


@pytest.fixture
def client(node):
    c = Client([node.api])
    yield c
    c.close()


def test_the_node_signs_a_sequencer_only_when_asked(client):
    with client.lock("py/seq", ttl=5) as a:
        assert a._sequencer == "", "a grant without sequencer=True carried one"
        assert a.sequencer.startswith("fls1."), "reading the sequencer did not fetch one"
    with client.lock("py/seq", ttl=5, sequencer=True) as b:
        assert b._sequencer.startswith("fls1."), "a grant with sequencer=True carried none"


def test_lock_grants_increasing_tokens_and_releases_on_exit(client):
    with client.lock("py/basic", ttl=5) as a:
        assert a.token > 0 and not a.lost.is_set()
        assert a.sequencer.startswith("fls1.") and a.cluster_id
        a.check()
    assert a.lost.is_set() and a.cause == "released"
    with pytest.raises(fencelock.LeaseLost):
        a.check()
    with client.try_lock("py/basic", ttl=5) as b:  # free again: the exit released it
        assert b.token > a.token


def test_try_lock_of_a_held_lock_raises_lock_held_with_the_holder(client, node):
    other = Client([node.api], holder="job-7")
    with other.lock("py/held", ttl=5) as held:
        with pytest.raises(fencelock.LockHeld) as ei:
            client.try_lock("py/held", ttl=5)
    e = ei.value
    assert isinstance(e, fencelock.FencelockError) and e.code == "lock_held"
    assert (e.name, e.holder, e.token) == ("py/held", "job-7", held.token)
    assert e.expires and abs(e.expires - time.time()) < 10


def test_waiters_are_granted_in_fifo_order(client, node):
    first = client.lock("py/fifo", ttl=5)
    order = []

    def wait_for_it(label):
        c = Client([node.api], holder=label)
        with c.lock("py/fifo", ttl=5, wait=20) as lk:
            order.append((label, lk.token))

    threads = []
    for label in ("second", "third"):
        t = threading.Thread(target=wait_for_it, args=(label,))
        t.start()
        threads.append(t)
        wait_until(lambda: len(client.describe("py/fifo").get("waiters", [])) == len(threads))
    first.release()
    for t in threads:
        t.join(30)
    assert [label for label, _ in order] == ["second", "third"]
    assert first.token < order[0][1] < order[1][1]


def test_a_wait_that_runs_out_raises_lock_held_and_leaves_the_queue(client):
    with client.lock("py/timeout", ttl=5):
        t0 = time.monotonic()
        with pytest.raises(fencelock.LockHeld):
            client.lock("py/timeout", ttl=5, wait=0.5)
        assert time.monotonic() - t0 >= 0.5
        assert client.describe("py/timeout").get("waiters", []) == []


def test_keep_alive_holds_the_lease_past_its_ttl(client):
    with client.lock("py/keepalive", ttl=1.5) as lk:
        time.sleep(4)
        lk.check()
        info = client.describe("py/keepalive")
        assert info["token"] == str(lk.token)


def test_the_same_request_id_gets_the_same_grant(client):
    a = client.lock("py/rid", ttl=5, request_id="retry-1")
    try:
        b = client.lock("py/rid", ttl=5, request_id="retry-1")
        assert (b.token, b.lease_id) == (a.token, a.lease_id)
    finally:
        a.release()


def test_another_client_with_the_same_request_id_makes_its_own_request(client, node):
    a = client.lock("py/rid2", ttl=5, request_id="retry-2")
    try:
        other = fencelock.Client([node.api])
        with pytest.raises(fencelock.LockHeld):
            other.lock("py/rid2", ttl=5, wait=0, request_id="retry-2")
        assert client.describe("py/rid2")["token"] == str(a.token)
    finally:
        a.release()


def test_errors_keep_their_identity(client):
    cases = [
        (lambda: client.lock("", ttl=5), fencelock.InvalidName, "invalid_name"),
        (lambda: client.lock("py/x", ttl=0.2), fencelock.InvalidTTL, "invalid_ttl"),
        (lambda: client.release("py/x", "0" * 32, 1), fencelock.NotHolder, "not_holder"),
        (lambda: client.describe("py/none"), fencelock.NotFound, "not_found"),
        (lambda: client.cancel_wait("py/none", "nobody"), fencelock.NotFound, "not_found"),
        (lambda: client.lock("py/x", ttl=5, holder="\x01"), fencelock.InvalidArgument, "invalid_argument"),
    ]
    for fn, cls, code in cases:
        with pytest.raises(cls) as ei:
            fn()
        assert ei.value.code == code and isinstance(ei.value, fencelock.FencelockError)


def test_renew_of_an_expired_grant_is_lease_expired(client):
    ans = client.call("Acquire", {"name": "py/expired", "ttl": "1s", "requestId": "r-expired"})
    g = ans["grant"]
    time.sleep(1.3)
    with pytest.raises((fencelock.LeaseExpired, fencelock.NotHolder)) as ei:
        client.renew("py/expired", g["leaseId"], int(g["token"]))
    assert ei.value.code in ("lease_expired", "not_holder")


def test_lost_is_set_when_the_node_freezes(own_node):
    c = Client([own_node.api], attempt_timeout=0.5)
    lk = c.lock("py/freeze", ttl=2)
    time.sleep(0.8)  # one renewal confirmed
    deadline = lk.deadline
    own_node.stop()
    try:
        assert not lk.lost.is_set()
        assert lk.lost.wait(timeout=5), "lost was not set within 5 s of a frozen node"
        assert time.monotonic() >= deadline - 0.01, "lost was set before the lease's deadline"
        with pytest.raises(fencelock.LeaseLost) as ei:
            lk.check()
        assert isinstance(ei.value.cause, fencelock.LeaseExpired)
    finally:
        own_node.cont()


def wait_until(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met within %ss" % timeout)


def test_an_acquire_with_its_own_request_id_waits_for_every_take_back_of_that_id(client):
    first, second = threading.Event(), threading.Event()
    client._take_backs[client._own_request_id("rid-take-back")] = [first, second]
    got = []
    t = threading.Thread(target=lambda: got.append(client.lock("py/takeback", ttl=5, request_id="rid-take-back")))
    t.start()
    t.join(0.5)
    assert not got, "the acquire went ahead while two take-backs of its id were under way"
    client._take_backs[client._own_request_id("rid-take-back")] = [second]
    first.set()
    t.join(0.5)
    assert not got, "the acquire went ahead while the second take-back of its id was under way"
    del client._take_backs[client._own_request_id("rid-take-back")]
    second.set()
    t.join(10)
    assert got and got[0].token > 0
    got[0].release()


def test_ctrl_c_during_a_wait_takes_the_request_back_at_once(client, node):
    holder = client.lock("py/giveup", ttl=5)
    code = ("import fencelock; c = fencelock.Client([%r]); print('asking', flush=True); "
            "c.lock('py/giveup', ttl=5, wait=30)" % node.api)
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(fencelock.__file__).parents[1]))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert p.stdout.readline() == b"asking\n"
        wait_until(lambda: len(client.describe("py/giveup").get("waiters", [])) == 1)
        p.send_signal(signal.SIGINT)
        assert p.wait(10) != 0 and b"KeyboardInterrupt" in p.stderr.read()
        # Taken back by the client before it exited: sooner than the node's
        # own take-back, 3 s after the call's connection closed.
        assert client.describe("py/giveup").get("waiters", []) == []
    finally:
        p.kill()
        holder.release()
