"""The Redis fence with redis-py on a real server: the Go package's script."""

import pathlib

import pytest
import redis

import fencelock
from fencelock import redis as fence_redis

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def fence(redis_addr):
    host, port = redis_addr.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    for k in r.scan_iter("py:*"):
        r.delete(k)
    f = fence_redis.Fence(r, prefix="py:fence:")
    yield f, r
    r.close()


def test_the_script_is_the_go_packages(fence):
    f, _ = fence
    assert fence_redis._SCRIPT == (ROOT / "redis" / "fence.lua").read_text()


def test_fenced_writes_apply_and_stale_tokens_write_nothing(fence):
    f, r = fence
    f.set("py/order", 5, "py:status", "paid")
    f.hset("py/order", 6, "py:order", {"status": "paid", "by": "B"})
    assert r.get("py:status") == b"paid" and r.hgetall("py:order") == {b"status": b"paid", b"by": b"B"}
    assert f.highest("py/order") == 6
    with pytest.raises(fencelock.StaleToken) as ei:
        f.set("py/order", 5, "py:status", "stale")
    assert (ei.value.domain, ei.value.token, ei.value.highest) == ("py/order", 5, 6)
    with pytest.raises(fencelock.StaleToken):
        f.delete("py/order", 4, "py:status")
    assert r.get("py:status") == b"paid"
    f.check("py/order", 10)
    with pytest.raises(fencelock.StaleToken):
        f.hset("py/order", 9, "py:order", {"status": "x"})
    f.delete("py/order", 10, "py:status")
    assert r.get("py:status") is None


def test_tokens_compare_as_integers_past_two_to_the_53(fence):
    f, r = fence
    big = 2**53 + 1
    f.set("py/big", big, "py:big", "1")
    with pytest.raises(fencelock.StaleToken):
        f.set("py/big", big - 1, "py:big", "2")  # a double would call these equal
    f.set("py/big", 2**64 - 1, "py:big", "3")
    assert f.highest("py/big") == 2**64 - 1


def test_bad_input_is_refused_before_anything_is_written(fence):
    f, r = fence
    for fn, cls in [(lambda: f.set("py/x", 0, "py:a", "v"), fencelock.MissingToken),
                    (lambda: f.set("py/x", 2**64, "py:a", "v"), fencelock.InvalidToken),
                    (lambda: f.set("", 1, "py:a", "v"), fencelock.InvalidName),
                    (lambda: f.set("py/x", 1, "py:fence:{other}", "v"), fencelock.InvalidArgument),
                    (lambda: f.hset("py/x", 1, "py:a", {}), fencelock.InvalidArgument)]:
        with pytest.raises(cls):
            fn()
    assert r.get("py:a") is None and f.highest("py/x") == 0
