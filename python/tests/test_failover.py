"""Three real nodes: the client follows the leader and survives its loss."""

import time

from conftest import leader

from fencelock import Client


def test_a_client_of_a_follower_follows_the_leader_hint(cluster):
    lead = leader(cluster)
    follower = next(n for n in cluster if n is not lead)
    c = Client([follower.api])  # knows only a follower: the not_leader answer names the leader
    with c.lock("py/hint", ttl=5) as lk:
        assert lk.token > 0
        assert lk.client._eps[-1].host == lead.api


def test_grants_continue_after_the_leader_freezes(cluster):
    c = Client([n.api for n in cluster], attempt_timeout=1.0)
    held = c.lock("py/failover/held", ttl=6)
    before = c.lock("py/failover/a", ttl=5)
    before.release()
    old = leader(cluster)
    old.stop()
    try:
        t0 = time.monotonic()
        after = c.lock("py/failover/b", ttl=5)  # retried until the new leader grants
        took = time.monotonic() - t0
        assert after.token > before.token
        new = leader([n for n in cluster if n is not old])
        assert new is not old
        # The held lock's renewals reach the new leader, which re-armed the
        # lease: it is still held, by the same grant.
        time.sleep(held.ttl / 3 + 0.5)
        held.check()
        assert c.describe("py/failover/held")["token"] == str(held.token)
        after.release()
        held.release()
        print("first grant after the leader froze: %.2f s" % took)
    finally:
        old.cont()
