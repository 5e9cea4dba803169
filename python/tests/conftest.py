"""Fixtures: real fencelock nodes (processes), PostgreSQL and Redis.

FENCELOCK_BIN names the fencelock binary (scripts/test.sh builds one);
without it the tests build one with go. PostgreSQL and Redis come from
FENCELOCK_TEST_POSTGRES_DSN and FENCELOCK_TEST_REDIS_ADDR
(scripts/services.sh); without them those tests skip, or fail when CI is set.
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def fencelock_bin(tmp_path_factory):
    b = os.environ.get("FENCELOCK_BIN")
    if b:
        return b
    out = str(tmp_path_factory.mktemp("bin") / "fencelock")
    subprocess.run(["go", "build", "-o", out, "./cmd/fencelock"], cwd=ROOT, check=True)
    return out


class Node:
    """One `fencelock serve` process on free loopback ports."""

    def __init__(self, binary, data_dir, node_id="n1", bootstrap=None, raft_port=None, api_port=None):
        self.binary, self.data_dir, self.id = binary, str(data_dir), node_id
        self.api = "127.0.0.1:%d" % (api_port or free_port())
        self.raft = "127.0.0.1:%d" % (raft_port or free_port())
        self.bootstrap = bootstrap
        self.proc = None
        self.log = None

    def start(self):
        args = [self.binary, "serve", "--node-id", self.id, "--listen", self.api, "--raft-addr", self.raft,
                "--data-dir", self.data_dir, "--log-level", "debug"]
        if self.bootstrap:
            args += ["--bootstrap", self.bootstrap]
        self.log = open(self.data_dir + ".log", "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        return self

    def wait(self, path="/healthz", timeout=20.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("fencelock serve exited: see " + self.data_dir + ".log")
            try:
                with urllib.request.urlopen("http://%s%s" % (self.api, path), timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("node %s did not answer %s within %ss" % (self.api, path, timeout))

    def status(self):
        req = urllib.request.Request("http://%s/fencelock.v1.ClusterService/Status" % self.api, data=b"{}",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=2) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.send_signal(signal.SIGSTOP)

    def cont(self):
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        if self.log:
            self.log.close()


@pytest.fixture(scope="module")
def node(fencelock_bin, tmp_path_factory):
    """A one-node service, shared by a module's tests."""
    n = Node(fencelock_bin, tmp_path_factory.mktemp("node") / "data").start().wait("/readyz?leader")
    yield n
    n.kill()


@pytest.fixture
def own_node(fencelock_bin, tmp_path):
    """A one-node service of the test's own, for tests that freeze it."""
    n = Node(fencelock_bin, tmp_path / "data").start().wait("/readyz?leader")
    yield n
    n.kill()


@pytest.fixture
def cluster(fencelock_bin, tmp_path):
    """Three nodes of one new Raft group, once it has a ready leader."""
    ports = [(free_port(), free_port()) for _ in range(3)]
    boot = ",".join("n%d=127.0.0.1:%d" % (i + 1, r) for i, (r, _) in enumerate(ports))
    nodes = [Node(fencelock_bin, tmp_path / ("d%d" % (i + 1)), "n%d" % (i + 1), boot, r, a).start()
             for i, (r, a) in enumerate(ports)]
    try:
        for n in nodes:
            n.wait()
        leader(nodes, timeout=20)
        yield nodes
    finally:
        for n in nodes:
            n.kill()


def leader(nodes, timeout=10.0):
    """The node that is a ready leader, waiting for one."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for n in nodes:
            try:
                st = n.status()
            except OSError:
                continue
            if st.get("state") == "leader" and st.get("ready"):
                return n
        time.sleep(0.05)
    raise RuntimeError("no ready leader within %ss" % timeout)


def from_env(name, server):
    v = os.environ.get(name)
    if v:
        return v
    msg = "%s is not set: start a throwaway %s with scripts/services.sh (see scripts/test.sh)" % (name, server)
    if os.environ.get("CI"):
        pytest.fail("CI is set, so tests needing servers must run, but " + msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def pg_dsn():
    return from_env("FENCELOCK_TEST_POSTGRES_DSN", "PostgreSQL")


@pytest.fixture(scope="session")
def redis_addr():
    return from_env("FENCELOCK_TEST_REDIS_ADDR", "Redis")
