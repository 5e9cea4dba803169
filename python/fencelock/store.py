"""A client of the fenced object store (``fencelock store``).

    store = Store("http://127.0.0.1:7080")
    info = store.put("report.pdf", lock.token, data)
    data, info = store.get("report.pdf")

Every write carries the lock's fencing token; the store refuses a stale
one with StaleToken and stores nothing.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request

from . import _fence
from ._wire import json_object
from .errors import BY_CODE, FencelockError, InvalidToken, Unavailable, from_code


class Store:
    """The fenced store at base_url (http://host:port)."""

    def __init__(self, base_url: str, timeout: float = 10.0):
        self.base = base_url.rstrip("/")
        if "://" not in self.base:
            self.base = "http://" + self.base
        self.timeout = timeout

    def _url(self, kind, key):
        return "%s/v1/%s/%s" % (self.base, kind, "/".join(urllib.parse.quote(s, safe="") for s in key.split("/")))

    def _do(self, method, url, body=None, headers=None):
        req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.read(), resp.headers
        except urllib.error.HTTPError as e:
            raise _error(e.code, e.read()) from None
        except (OSError, http.client.HTTPException) as e:
            raise Unavailable("store %s: %s" % (self.base, e)) from None

    def _write_headers(self, token, domain, if_match, if_none_match, idempotency_key):
        h = {"Fencing-Token": str(_fence.token(token, "the store"))}
        for name, v in (("Fencing-Domain", domain), ("If-Match", if_match), ("If-None-Match", if_none_match),
                        ("Idempotency-Key", idempotency_key)):
            if v:
                h[name] = v
        return h

    def put(self, key: str, token: int, data: bytes, *, domain: str = "", if_match: str = "",
            if_none_match: str = "", idempotency_key: str = "") -> dict:
        """Stores data at key with token; returns the version's info
        (key, etag, token, domain, size). Raises StaleToken, MissingToken,
        InvalidToken, InvalidName, TooLarge, PreconditionFailed."""
        h = self._write_headers(token, domain, if_match, if_none_match, idempotency_key)
        body, _ = self._do("PUT", self._url("objects", key), bytes(data), h)
        return _json(body)

    def get(self, key: str):
        """Returns (data, info) of key: info has etag, token and domain. Raises NotFound."""
        body, h = self._do("GET", self._url("objects", key))
        tok = h.get("Fencing-Token") or "0"
        if not (tok.isdigit() and tok.isascii()):
            raise InvalidToken("get %r: the store sent Fencing-Token %r" % (key, tok))
        return body, {"key": key, "etag": h.get("ETag", ""), "token": int(tok), "domain": h.get("Fencing-Domain", "")}

    def delete(self, key: str, token: int, *, domain: str = "") -> None:
        """Deletes key, fenced by token. Raises StaleToken, NotFound."""
        self._do("DELETE", self._url("objects", key), None, self._write_headers(token, domain, "", "", ""))

    def check(self, domain: str, token: int) -> None:
        """Raises domain's highest token to token, storing nothing else."""
        _fence.domain(domain)
        self._do("POST", self._url("fences", domain), b"", self._write_headers(token, "", "", "", ""))

    def highest(self, domain: str) -> int:
        """The highest token domain has accepted, or 0."""
        _fence.domain(domain)
        try:
            body, _ = self._do("GET", self._url("fences", domain))
        except FencelockError as e:
            if e.code == "not_found":
                return 0
            raise
        return int(_json(body).get("highest", 0))


def _json(body) -> dict:
    doc = json_object(body)
    if doc is None:
        raise Unavailable("the store sent a malformed answer")
    return doc


def _error(status, body):
    doc = json_object(body) or {}
    code, msg = str(doc.get("error") or ""), str(doc.get("message") or "HTTP %d" % status)
    if status >= 500 and code not in BY_CODE:
        return Unavailable(msg)
    fields = {}
    if code == "stale_fencing_token":
        fields = {"domain": doc.get("domain", ""), "token": int(doc.get("token", 0)),
                  "highest": int(doc.get("highest", 0))}
    return from_code(code or "unknown", msg, **fields)
