"""Fenced writes to PostgreSQL, with psycopg 3 or psycopg2.

Both fences put the token check in the same statement or transaction as
the write, so PostgreSQL itself is the final arbiter. They are the Go
package's (github.com/fencelock/fencelock/postgres), statement for
statement, so Go and Python workers can share a table.

Row fence: each protected row carries the highest token that wrote it
(``add_fence_column``), and every write is one conditional UPDATE::

    applied = fenced_update(conn, "orders", key={"id": 42},
                            set={"status": "paid", "paid_amount": 100},
                            where={"status": "pending"}, token=lock.token)
    conn.commit()

Domain fence: one row per fence domain in ``fencelock_fences``;
``check(conn, domain, token)`` first in a transaction fences everything the
transaction writes after it.

Nothing here commits: the functions run in the connection's current
transaction (psycopg2 and psycopg 3 open one implicitly), and the caller
commits or rolls back as usual. Tokens are BIGINT: a token above 2^63-1 is
refused with InvalidToken. A write path that skips the fence is not fenced.
"""

from __future__ import annotations

from . import _fence
from .errors import InvalidArgument, InvalidName, NotFound, StaleToken

FENCE_COLUMN = "last_fence"
FENCE_TABLE = "fencelock_fences"
FENCE_TABLE_SQL = """CREATE TABLE IF NOT EXISTS fencelock_fences (
    domain TEXT PRIMARY KEY,
    token  BIGINT NOT NULL CHECK (token > 0)
)"""

_CHECK_SQL = """INSERT INTO fencelock_fences AS f (domain, token) VALUES (%s, %s)
ON CONFLICT (domain) DO UPDATE SET token = EXCLUDED.token
WHERE f.token <= EXCLUDED.token
RETURNING f.token"""
_HIGHEST_SQL = "SELECT token FROM fencelock_fences WHERE domain = %s"
# Fails on purpose: PostgreSQL then refuses the transaction's further
# statements, and its commit rolls back.
_ABORT_SQL = ("DO $$ BEGIN RAISE EXCEPTION 'fencelock: stale fencing token; "
              "this transaction must roll back'; END $$")

MAX_TOKEN = 2**63 - 1  # BIGINT
_IN_TRANSACTION = 2  # libpq's PQTRANS_INTRANS, as psycopg and psycopg2 report it


def _token(t, what) -> int:
    return _fence.token(t, what, MAX_TOKEN)


_domain = _fence.domain


def quote_ident(name: str) -> str:
    """Quotes a table name, optionally schema-qualified ("billing.orders")."""
    parts = str(name).split(".")
    if any(not p or "\x00" in p for p in parts):
        raise InvalidName("identifier %r is malformed" % (name,))
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def _column(name: str) -> str:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InvalidName("column name %r is malformed" % (name,))
    return _param_safe('"' + name.replace('"', '""') + '"')


def _param_safe(sql: str) -> str:
    """Escapes % in quoted names for a statement run with parameters."""
    return sql.replace("%", "%%")


def create_fence_table(conn) -> None:
    """Creates the domain fence's table if it does not exist (not committed)."""
    with conn.cursor() as cur:
        cur.execute(FENCE_TABLE_SQL)


def add_fence_column(conn, table: str) -> None:
    """Adds ``last_fence BIGINT NOT NULL DEFAULT 0`` to table if missing (not committed).

    An existing last_fence column must be BIGINT NOT NULL; otherwise
    InvalidArgument.
    """
    ident = quote_ident(table)
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s BIGINT NOT NULL DEFAULT 0" % (ident, FENCE_COLUMN))
        cur.execute("SELECT format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
                    "WHERE attrelid = %s::regclass AND attname = %s AND NOT attisdropped", (ident, FENCE_COLUMN))
        typ, not_null = cur.fetchone()
    if typ != "bigint" or not not_null:
        raise InvalidArgument("table %s has a column %s of type %s%s, want BIGINT NOT NULL"
                              % (table, FENCE_COLUMN, typ, "" if not_null else " (nullable)"))


def _row_domain(table, key):
    return "%s(%s)" % (table, ",".join("%s=%s" % kv for kv in key.items()))


def update_sql(table: str, key: dict, set: dict, where: dict | None, token: int):
    """Returns the fenced UPDATE and its parameters (see fenced_update)."""
    domain = _row_domain(table, key or {})
    if not key:
        raise InvalidArgument("fenced update of %s: no key names the row" % table)
    tok = _token(token, domain)
    args = []
    sets = []
    for col, val in (set or {}).items():
        if col == FENCE_COLUMN:
            raise InvalidArgument("fenced update of %s: setting %s would bypass the fence" % (table, FENCE_COLUMN))
        sets.append("%s = %%s" % _column(col))
        args.append(val)
    sets.append("%s = %%s" % FENCE_COLUMN)
    args.append(tok)
    conds = []
    for col, val in key.items():
        if val is None:
            raise InvalidArgument("fenced update of %s: key %s is NULL, which names no row" % (table, col))
        conds.append("%s = %%s" % _column(col))
        args.append(val)
    for col, val in (where or {}).items():
        if val is None:
            conds.append("%s IS NULL" % _column(col))
            continue
        conds.append("%s = %%s" % _column(col))
        args.append(val)
    conds.append("%s <= %%s" % FENCE_COLUMN)
    args.append(tok)
    sql = "UPDATE %s SET %s WHERE %s" % (_param_safe(quote_ident(table)), ", ".join(sets), " AND ".join(conds))
    return sql, args


def fenced_update(conn, table: str, key: dict, set: dict, where: dict | None = None, token: int | None = None) -> bool:
    """Updates one row of table if token may write it: a payment that a stale worker cannot repeat.

    ``key`` names the row (column: value, a primary or unique key),
    ``set`` the new values, ``where`` business conditions (column: value;
    None tests IS NULL), ``token`` the lock's fencing token. It runs::

        UPDATE "orders" SET "status" = %s, last_fence = %s
        WHERE "id" = %s AND "status" = %s AND last_fence <= %s

    Returns True if the row was updated; False if the token may write it
    but a where condition did not hold (already done: not an error, do not
    retry). Raises StaleToken if the row was written with a higher token (a
    newer holder exists: do not retry with this token), NotFound if no row
    has the key, InvalidName, InvalidArgument, MissingToken, InvalidToken,
    and the driver's errors. It does not commit.
    """
    sql, args = update_sql(table, key, set, where, token)
    with conn.cursor() as cur:
        cur.execute(sql, args)
        if cur.rowcount > 0:
            return True
        # Nothing updated: find out why. last_fence never goes down, so a
        # value above the token proves it stale. FOR SHARE: at REPEATABLE
        # READ a plain read would see the snapshot's older value.
        cond = " AND ".join("%s = %%s" % _column(c) for c in key)
        cur.execute("SELECT %s FROM %s WHERE %s FOR SHARE" % (FENCE_COLUMN, _param_safe(quote_ident(table)), cond),
                    list(key.values()))
        row = cur.fetchone()
    domain = _row_domain(table, key)
    if row is None:
        raise NotFound("fenced update of %s: no such row" % domain)
    if row[0] > token:
        raise StaleToken("stale fencing token %d for %s: highest accepted is %d" % (token, domain, row[0]),
                         domain=domain, token=token, highest=row[0])
    return False


def check(conn, domain: str, token: int) -> None:
    """Fences the connection's current transaction in domain.

    Accepts token if it is at least the highest token domain has accepted,
    stores it as the new highest, and keeps the domain's row locked until
    the transaction ends, so everything the transaction writes after it is
    fenced. Call it before the transaction's writes. Raises StaleToken for a
    lower token, after which the transaction is aborted (PostgreSQL refuses
    its further statements; roll back), and InvalidArgument on a connection
    in autocommit mode, where nothing after it could be fenced. The table
    must exist (create_fence_table).
    """
    _domain(domain)
    tok = _token(token, domain)
    with conn.cursor() as cur:
        cur.execute(_CHECK_SQL, (domain, tok))
        accepted = cur.fetchone() is not None
        if conn.info.transaction_status != _IN_TRANSACTION:
            # Autocommit: the row lock ended with the statement, and nothing
            # after it would be fenced.
            raise InvalidArgument("check of %r must run inside a transaction (the connection is in autocommit)"
                                  % domain)
        if accepted:
            return
        cur.execute(_HIGHEST_SQL, (domain,))
        highest = cur.fetchone()[0]
        try:
            cur.execute(_ABORT_SQL)
        except Exception:  # the driver's error: the transaction is now aborted, as wanted
            pass
    raise StaleToken("stale fencing token %d for domain %r: highest accepted is %d" % (token, domain, highest),
                     domain=domain, token=token, highest=highest)


def highest(conn, domain: str) -> int:
    """Returns the highest token domain has accepted, or 0."""
    _domain(domain)
    with conn.cursor() as cur:
        cur.execute(_HIGHEST_SQL, (domain,))
        row = cur.fetchone()
    return row[0] if row else 0
