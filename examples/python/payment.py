#!/usr/bin/env python3
"""The payment of order 42, with two workers and a pause: fenced by PostgreSQL.

Worker A takes the lock of order 42, reads the pending order, and freezes
(SIGSTOP, as a long GC pause or a descheduled VM would) until its lease has
expired. Worker B takes the lock, pays the order and releases. A wakes up
and, not knowing it lost the lock, pays too: PostgreSQL refuses its update
with StaleToken, because B's token is higher. The order is paid once.

    python3 payment.py --server 127.0.0.1:7070 --postgres postgresql://postgres@127.0.0.1/postgres

It uses the table fencelock_demo_orders (created if missing). Exit status
0: paid once, by B; 1: not; 2: a usage or setup error.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import fencelock  # noqa: E402
from fencelock import postgres  # noqa: E402

TABLE = "fencelock_demo_orders"
ORDER = 42


def connect(dsn, driver):
    if driver == "psycopg2":
        import psycopg2
        return psycopg2.connect(dsn)
    import psycopg
    return psycopg.connect(dsn)


def setup(dsn, driver):
    conn = connect(dsn, driver)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS %s (id INT PRIMARY KEY, amount INT NOT NULL, "
                    "status TEXT NOT NULL, paid_by TEXT)" % TABLE)
    postgres.add_fence_column(conn, TABLE)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO " + TABLE + " (id, amount, status, paid_by, last_fence) "
                    "VALUES (%s, 100, 'pending', NULL, 0) "
                    "ON CONFLICT (id) DO UPDATE SET status = 'pending', paid_by = NULL, last_fence = 0", (ORDER,))
    conn.commit()
    conn.close()


def worker(args):
    """One worker: lock, read, (gate), pay with the row fence, release."""
    def emit(kind, **kw):
        print(json.dumps(dict(worker=args.name, kind=kind, **kw)), flush=True)

    client = fencelock.Client([args.server], holder="worker " + args.name)
    conn = connect(args.postgres, args.driver)
    with client.lock("orders/%d" % ORDER, ttl=args.ttl) as lock:
        emit("locked", token=lock.token)
        with conn.cursor() as cur:
            cur.execute("SELECT status FROM " + TABLE + " WHERE id = %s", (ORDER,))
            status = cur.fetchone()[0]
        conn.commit()
        emit("read", token=lock.token, status=status)
        if args.gate:
            emit("gate", token=lock.token)
            sys.stdin.readline()  # the act freezes this process here
        try:
            paid = postgres.fenced_update(conn, TABLE, key={"id": ORDER},
                                          set={"status": "paid", "paid_by": args.name},
                                          where={"status": "pending"}, token=lock.token)
            conn.commit()
            emit("paid" if paid else "already-paid", token=lock.token)
        except fencelock.StaleToken as e:
            conn.rollback()
            emit("refused", token=lock.token, highest=e.highest)
    conn.close()


def start(args, name, gate):
    cmd = [sys.executable, os.path.abspath(__file__), "worker", "--name", name, "--server", args.server,
           "--postgres", args.postgres, "--driver", args.driver, "--ttl", str(args.ttl)]
    if gate:
        cmd.append("--gate")
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def until(proc, kind, events):
    for line in proc.stdout:
        ev = json.loads(line)
        events.append(ev)
        print("  %-8s %-13s %s" % ("worker " + ev["worker"], ev["kind"],
                                   " ".join("%s=%s" % kv for kv in ev.items() if kv[0] not in ("worker", "kind"))))
        if ev["kind"] == kind:
            return ev
    raise SystemExit("worker ended before %r" % kind)


def act(args):
    setup(args.postgres, args.driver)
    events = []
    a = start(args, "A", gate=True)
    until(a, "gate", events)
    a.send_signal(signal.SIGSTOP)
    print("  act      froze A (SIGSTOP); B asks for the lock")
    b = start(args, "B", gate=False)
    until(b, "paid", events)
    b.wait()
    time.sleep(args.ttl)  # A stays frozen a while longer, as a long pause would
    a.send_signal(signal.SIGCONT)
    a.stdin.write("\n")
    a.stdin.flush()
    print("  act      woke A")
    refused = until(a, "refused", events)
    a.wait()
    conn = connect(args.postgres, args.driver)
    with conn.cursor() as cur:
        cur.execute("SELECT status, paid_by, last_fence FROM " + TABLE + " WHERE id = %s", (ORDER,))
        status, paid_by, fence = cur.fetchone()
    conn.close()
    b_token = next(e["token"] for e in events if e["worker"] == "B" and e["kind"] == "paid")
    ok = status == "paid" and paid_by == "B" and fence == b_token and refused["highest"] == b_token
    print("verdict: order %d %s (status %s, paid by %s, last_fence %d)"
          % (ORDER, "paid once, by B; A's update was refused" if ok else "NOT paid once by B", status, paid_by, fence))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="act", choices=["act", "worker"], help=argparse.SUPPRESS)
    p.add_argument("--server", default=os.environ.get("FENCELOCK_SERVER", "127.0.0.1:7070"))
    p.add_argument("--postgres", required=True, help="PostgreSQL DSN")
    p.add_argument("--driver", choices=["psycopg", "psycopg2"], default="psycopg")
    p.add_argument("--ttl", type=float, default=2.0, help="lease TTL in seconds")
    p.add_argument("--name", default="A", help=argparse.SUPPRESS)
    p.add_argument("--gate", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mode == "worker":
        worker(args)
        return 0
    return act(args)


if __name__ == "__main__":
    sys.exit(main())
