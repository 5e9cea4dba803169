"""The JSON API on the wire: durations, tokens, errors and HTTP calls.

Internal to the package; docs/API.md describes the API for any language.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import re
import threading
import time
import urllib.parse

from . import errors

SERVICE = "/fencelock.v1.LockService/"

# Connect codes of errors that carry no fencelock code.
_CONNECT_CODES = {
    "unavailable": errors.Unavailable,
    "deadline_exceeded": errors.Unavailable,
    "invalid_argument": errors.InvalidArgument,
    "not_found": errors.NotFound,
    "resource_exhausted": errors.TooLarge,
    "unauthenticated": errors.Unauthenticated,
}


def duration(seconds: float) -> str:
    """Formats seconds as a JSON duration: "10s", "1.5s"."""
    if seconds < 0:
        raise errors.InvalidArgument("negative duration %r" % seconds)
    s = "%.9f" % seconds
    return s.rstrip("0").rstrip(".") + "s"


_DURATION = re.compile(r"^[0-9]+(\.[0-9]{1,9})?s$")


def parse_duration(s) -> float:
    """Parses a JSON duration from the service ("10s", "0.250s") into seconds."""
    if not isinstance(s, str) or not _DURATION.match(s):
        raise errors.Unavailable("service sent a malformed duration %r" % (s,))
    return float(s[:-1])


def parse_token(t) -> int:
    """Parses a token from the service: a decimal string (or a JSON integer) in 1..2^64-1."""
    if isinstance(t, str) and t.isdigit() and t.isascii():
        t = int(t)
    if isinstance(t, bool) or not isinstance(t, int) or not 0 < t < 2**64:
        raise errors.Unavailable("service sent a malformed token %r" % (t,))
    return t


_LEASE_ID = re.compile(r"^[0-9a-f]{32}$")


def grant(ans: dict):
    """Returns (token, lease id, ttl in seconds, sequencer, cluster id) of an
    Acquire answer."""
    g = ans.get("grant")
    if not isinstance(g, dict) or not isinstance(g.get("leaseId"), str) or not _LEASE_ID.match(g["leaseId"]):
        raise errors.Unavailable("service returned no grant")
    ttl = parse_duration(g.get("ttl"))
    if not math.isfinite(ttl) or ttl <= 0:
        raise errors.Unavailable("service returned a grant with ttl %r" % g.get("ttl"))
    seq, cluster = g.get("sequencer", ""), g.get("clusterId", "")
    if not isinstance(seq, str) or not isinstance(cluster, str):
        raise errors.Unavailable("service returned a grant with a malformed sequencer")
    return parse_token(g.get("token")), g["leaseId"], ttl, seq, cluster


def _varint(b: bytes, i: int):
    v = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def _fields(b: bytes):
    """Yields (field number, value) of a protobuf message: ints or bytes."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, typ = key >> 3, key & 7
        if typ == 0:
            v, i = _varint(b, i)
        elif typ == 2:
            n, i = _varint(b, i)
            v, i = b[i : i + n], i + n
        elif typ == 1:
            v, i = b[i : i + 8], i + 8
        elif typ == 5:
            v, i = b[i : i + 4], i + 4
        else:
            raise ValueError("wire type %d" % typ)
        yield num, v


def error_detail(value: str) -> dict:
    """Decodes a fencelock.v1.ErrorDetail from its base64 protobuf form."""
    raw = base64.b64decode(value + "=" * (-len(value) % 4))
    names = {1: "code", 2: "name", 3: "holder", 6: "leader"}
    d = {}
    for num, v in _fields(raw):
        if num in names and isinstance(v, bytes):
            d[names[num]] = v.decode("utf-8", "replace")
        elif num == 4 and isinstance(v, int):
            d["token"] = v
        elif num == 5 and isinstance(v, bytes):
            ts = dict(_fields(v))
            d["expires"] = ts.get(1, 0) + ts.get(2, 0) / 1e9
    return d


def json_object(body):
    """The JSON object in body, or None if it holds none."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def error_from_body(status: int, body: bytes) -> errors.FencelockError:
    """Turns a Connect error answer into the typed error it carries."""
    doc = json_object(body) or {}
    message = str(doc.get("message") or "HTTP %d" % status)
    details = doc.get("details")
    for det in details if isinstance(details, list) else []:
        if not isinstance(det, dict) or det.get("type") != "fencelock.v1.ErrorDetail":
            continue
        try:
            d = error_detail(str(det.get("value", "")))
        except (ValueError, TypeError):
            continue
        code = d.pop("code", "")
        if code == "stale_fencing_token":
            d = {"domain": d.get("name", ""), "highest": d.get("token", 0)}
        if code:
            return errors.from_code(code, message, **d)
    cls = _CONNECT_CODES.get(str(doc.get("code", "")))
    if cls is None and status >= 500:
        cls = errors.Unavailable
    if cls is None:
        err = errors.FencelockError(message)
        err.code = str(doc.get("code", "unknown"))
        return err
    return cls(message)


class Endpoint:
    """One node's API: a pool of kept-alive HTTP connections to it."""

    def __init__(self, url: str, dial_timeout: float, max_idle: int = 8):
        try:
            u = urllib.parse.urlsplit(url)
            _ = u.port  # a malformed port raises ValueError
            ok = u.scheme in ("http", "https") and u.hostname and not u.username and u.path in ("", "/")
        except ValueError:
            ok = False
        if not ok:
            raise errors.InvalidArgument("endpoint %r: want host:port or an http(s) URL" % url)
        self.url = url
        self.host = u.netloc
        self._https = u.scheme == "https"
        self._dial_timeout = dial_timeout
        self._idle = []
        self._max_idle = max_idle
        self._mu = threading.Lock()
        self.silent_until = 0.0

    def _conn(self, fresh=False):
        with self._mu:
            if self._idle and not fresh:
                return self._idle.pop(), True
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self.host, timeout=self._dial_timeout), False

    def _put(self, conn):
        with self._mu:
            if len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self):
        with self._mu:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def post(self, method: str, body: dict, timeout: float, on_unknown=None) -> dict:
        """Calls one method once; raises a FencelockError on failure.

        A connection kept from an earlier call that turns out closed is
        replaced by a new one at once (every method is safe to repeat);
        on_unknown, if given, hears of the attempt whose outcome is unknown.
        A failure without an answer raises Unavailable with no_answer set.
        """
        data = json.dumps(body).encode()
        deadline = time.monotonic() + timeout
        fresh = False
        while True:
            conn, reused = self._conn(fresh)
            try:
                status, answer = self._exchange(conn, method, data, deadline)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                conn.close()
                if reused and time.monotonic() < deadline:
                    if on_unknown:
                        on_unknown(errors.Unavailable("%s: %s" % (self.host, e)))
                    fresh = True
                    continue
                raise _no_answer("%s: %s" % (self.host, e)) from None
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                raise _no_answer("%s: %s" % (self.host, e)) from None
            self._put(conn)
            if status != 200:
                raise error_from_body(status, answer)
            doc = json_object(answer)
            if doc is None:
                raise errors.Unavailable("%s sent a malformed answer" % self.host)
            return doc

    def _exchange(self, conn, method, data, deadline):
        if conn.sock is None:
            conn.timeout = max(0.001, min(self._dial_timeout, deadline - time.monotonic()))
            conn.connect()
        conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
        conn.request("POST", SERVICE + method, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()


def _no_answer(msg):
    err = errors.Unavailable(msg)
    err.no_answer = True
    return err


def endpoint_url(e: str) -> str:
    """host:port or a URL, as a URL without a trailing slash."""
    u = e.strip().rstrip("/")
    if "://" not in u:
        u = "http://" + u
    return u


