"""The fenced store's client against a real `fencelock store` process."""

import pytest

import fencelock
from conftest import free_port
from fencelock.store import Store


@pytest.fixture(scope="module")
def store(fencelock_bin, tmp_path_factory):
    import subprocess
    import time
    import urllib.request

    addr = "127.0.0.1:%d" % free_port()
    d = tmp_path_factory.mktemp("store")
    p = subprocess.Popen([fencelock_bin, "store", "--listen", addr, "--data-dir", str(d / "data")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen("http://%s/healthz" % addr, timeout=1).close()
            break
        except OSError:
            if time.monotonic() > end or p.poll() is not None:
                raise
            time.sleep(0.05)
    yield Store("http://" + addr)
    p.kill()
    p.wait()


def test_put_get_and_stale_refusal(store):
    info = store.put("py/report.pdf", 5, b"v5")
    assert (info["token"], info["domain"], info["size"]) == (5, "py/report.pdf", 2)
    data, got = store.get("py/report.pdf")
    assert data == b"v5" and got["token"] == 5 and got["etag"] == info["etag"]
    with pytest.raises(fencelock.StaleToken) as ei:
        store.put("py/report.pdf", 4, b"v4")
    assert (ei.value.token, ei.value.highest, ei.value.domain) == (4, 5, "py/report.pdf")
    assert store.get("py/report.pdf")[0] == b"v5"


def test_domain_fence_and_errors(store):
    store.check("py/reports", 9)
    assert store.highest("py/reports") == 9
    assert store.highest("py/never") == 0
    with pytest.raises(fencelock.StaleToken):
        store.put("py/a.txt", 8, b"x", domain="py/reports")
    with pytest.raises(fencelock.NotFound):
        store.get("py/missing")
    with pytest.raises(fencelock.MissingToken):
        store.put("py/a.txt", 0, b"x")
    with pytest.raises(fencelock.PreconditionFailed):
        store.put("py/a.txt", 9, b"x", domain="py/reports", if_match='"nope"')
    store.put("py/a.txt", 9, b"x", domain="py/reports")
    store.delete("py/a.txt", 9, domain="py/reports")
    with pytest.raises(fencelock.NotFound):
        store.get("py/a.txt")
