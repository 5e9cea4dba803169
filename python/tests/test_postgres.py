"""The PostgreSQL fences with psycopg 3 and psycopg2, on a real server."""

import pathlib
import types
import subprocess
import sys

import pytest

import fencelock
from fencelock import postgres

ROOT = pathlib.Path(__file__).resolve().parents[2]
DRIVERS = ["psycopg", "psycopg2"]


def connect(dsn, driver):
    mod = __import__(driver)
    return mod.connect(dsn)


@pytest.fixture(params=DRIVERS)
def db(request, pg_dsn):
    c = connect(pg_dsn, request.param)
    table = "py_orders_" + request.param
    with c.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS %s" % table)
        cur.execute("CREATE TABLE %s (id INT PRIMARY KEY, status TEXT NOT NULL, paid_by TEXT)" % table)
        cur.execute("INSERT INTO %s VALUES (42, 'pending', NULL), (43, 'pending', NULL)" % table)
    postgres.add_fence_column(c, table)
    postgres.create_fence_table(c)
    with c.cursor() as cur:
        cur.execute("DELETE FROM fencelock_fences WHERE domain LIKE 'py/%%'")
    c.commit()
    yield types.SimpleNamespace(conn=c, table=table)
    c.close()


def row(db, id_):
    with db.conn.cursor() as cur:
        cur.execute("SELECT status, paid_by, last_fence FROM %s WHERE id = %%s" % db.table, (id_,))
        r = cur.fetchone()
    db.conn.commit()
    return r


def pay(db, token, by, id_=42):
    applied = postgres.fenced_update(db.conn, db.table, key={"id": id_}, set={"status": "paid", "paid_by": by},
                                     where={"status": "pending"}, token=token)
    db.conn.commit()
    return applied


def test_fenced_update_applies_then_is_already_done(db):
    assert pay(db, 5, "B") is True
    assert row(db, 42) == ("paid", "B", 5)
    assert pay(db, 6, "C") is False  # a valid holder: the work was done
    assert row(db, 42) == ("paid", "B", 5)


def test_fenced_update_refuses_a_stale_token(db):
    assert pay(db, 7, "B")
    with pytest.raises(fencelock.StaleToken) as ei:
        pay(db, 5, "A")
    db.conn.rollback()
    e = ei.value
    assert (e.token, e.highest, e.code) == (5, 7, "stale_fencing_token")
    assert e.domain == "%s(id=42)" % db.table
    assert row(db, 42) == ("paid", "B", 7)


def test_fenced_update_refuses_bad_input(db):
    with pytest.raises(fencelock.NotFound):
        postgres.fenced_update(db.conn, db.table, key={"id": 1}, set={"status": "x"}, token=3)
    db.conn.rollback()
    for kw, cls in [({"token": 0}, fencelock.MissingToken), ({"token": 2**63}, fencelock.InvalidToken),
                    ({"token": 3, "key": {}}, fencelock.InvalidArgument),
                    ({"token": 3, "set": {"last_fence": 9}}, fencelock.InvalidArgument),
                    ({"token": 3, "key": {"id": None}}, fencelock.InvalidArgument),
                    ({"token": 3, "set": {"": 1}}, fencelock.InvalidName)]:
        args = dict(key={"id": 42}, set={"status": "paid"}, token=3)
        args.update(kw)
        with pytest.raises(cls):
            postgres.fenced_update(db.conn, db.table, **args)
    assert row(db, 42) == ("pending", None, 0)


def test_where_none_tests_is_null(db):
    applied = postgres.fenced_update(db.conn, db.table, key={"id": 43}, set={"status": "paid"},
                                     where={"paid_by": None}, token=2)
    db.conn.commit()
    assert applied and row(db, 43) == ("paid", None, 2)


def test_domain_check_fences_the_transaction(db):
    postgres.check(db.conn, "py/ledger", 9)
    with db.conn.cursor() as cur:
        cur.execute("UPDATE %s SET status = 'fenced-by-9' WHERE id = 42" % db.table)
    db.conn.commit()
    assert postgres.highest(db.conn, "py/ledger") == 9
    postgres.check(db.conn, "py/ledger", 9)  # the same token again is accepted
    db.conn.commit()
    with pytest.raises(fencelock.StaleToken) as ei:
        postgres.check(db.conn, "py/ledger", 8)
    assert (ei.value.highest, ei.value.domain) == (9, "py/ledger")
    # The refused transaction is aborted: a write after it never lands.
    with pytest.raises(Exception):
        with db.conn.cursor() as cur:
            cur.execute("UPDATE %s SET status = 'stale' WHERE id = 42" % db.table)
    db.conn.rollback()
    assert row(db, 42)[0] == "fenced-by-9"
    with pytest.raises(fencelock.InvalidName):
        postgres.check(db.conn, " py/ledger", 10)


def test_add_fence_column_refuses_a_column_of_another_type(db):
    with db.conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS py_wrong")
        cur.execute("CREATE TABLE py_wrong (id INT PRIMARY KEY, last_fence INT)")
    with pytest.raises(fencelock.InvalidArgument):
        postgres.add_fence_column(db.conn, "py_wrong")
    db.conn.rollback()


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_worker_frozen_past_its_lease_is_refused(driver, node, pg_dsn):
    """The payment of order 42: worker A is SIGSTOPped past its lease, B pays,
    A wakes and its update is refused by PostgreSQL with StaleToken."""
    ex = ROOT / "examples" / "python" / "payment.py"
    out = subprocess.run([sys.executable, str(ex), "--server", node.api, "--postgres", pg_dsn,
                          "--driver", driver, "--ttl", "1.5"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "worker A refused" in out.stdout and "paid once, by B" in out.stdout


def test_the_readme_example_pays_the_order(node, pg_dsn):
    """python/README.md's first example, run as written (with this test's
    node and database), pays order 42 once with the row fence."""
    readme = (ROOT / "python" / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert '"127.0.0.1:7070"' in code and '"dbname=shop"' in code
    code = code.replace('"127.0.0.1:7070"', repr(node.api)).replace('"dbname=shop"', repr(pg_dsn))
    import psycopg
    with psycopg.connect(pg_dsn) as c:
        c.execute("DROP TABLE IF EXISTS orders")
        c.execute("CREATE TABLE orders (id INT PRIMARY KEY, status TEXT NOT NULL)")
        c.execute("INSERT INTO orders VALUES (42, 'pending')")
        postgres.add_fence_column(c, "orders")
    exec(compile(code, "python/README.md", "exec"), {})
    with psycopg.connect(pg_dsn) as c:
        status, fence = c.execute("SELECT status, last_fence FROM orders WHERE id = 42").fetchone()
        c.execute("DROP TABLE orders")
    assert status == "paid" and fence > 0


def test_domain_check_refuses_autocommit(db):
    db.conn.autocommit = True
    with pytest.raises(fencelock.InvalidArgument):
        postgres.check(db.conn, "py/auto", 3)
    db.conn.autocommit = False
