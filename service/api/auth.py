"""API keys: who is calling, resolved once per request by :class:`AuthMiddleware`.

With ``MST_API_KEYS`` and/or ``MST_API_KEYS_FILE`` set, every request but
``/healthz`` and ``/readyz`` needs ``Authorization: Bearer <key>``; anything
else is a 401 with a ``WWW-Authenticate`` challenge. With neither set the
service is open and every request's owner is ``""`` (as before keys existed).

A key is known only by its SHA-256 hash. The owner it acts as is the name
given on its line of the keys file, else ``k:`` and the first 16 hex digits of
its hash, so the key itself is never stored, logged, or compared in plain. A
presented key is hashed and compared with **every** configured hash by
:func:`hmac.compare_digest`, so the time taken says nothing about which
configured hash, or how much of one, it came close to.

The middleware records the owner in the request's scope (``mst.owner``);
the routes read it through ``OwnerDep`` (or :func:`owner_of`, on a job's hot
path), and a request that is not let in never reaches one.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..api_keys import read_key_file
from ..errors import UnauthorizedError
from .problems import service_error_response

if TYPE_CHECKING:
    from ..settings import Settings

#: the routes open without a key (probes of orchestrators and load balancers)
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: the scope key holding the caller's owner id
SCOPE_KEY = "mst.owner"


def key_owner(digest: bytes) -> str:
    """The owner id of a key without a name: ``k:`` and 16 hex digits of its hash (never the key)."""
    return "k:" + digest.hex()[:16]


@dataclass(frozen=True)
class KeyRing:
    """The configured keys, by hash; empty when authentication is off."""

    entries: tuple[tuple[bytes, str], ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        pairs: list[tuple[bytes, str | None]] = [
            (hashlib.sha256(k.get_secret_value().encode("ascii")).digest(), None) for k in settings.api_keys
        ]
        if settings.api_keys_file is not None:
            pairs += read_key_file(settings.api_keys_file)
        return cls.of(pairs)

    @classmethod
    def of(cls, pairs: Iterable[tuple[bytes, str | None]]) -> KeyRing:
        return cls(tuple((digest, name or key_owner(digest)) for digest, name in pairs))

    @property
    def enabled(self) -> bool:
        return bool(self.entries)

    def owner(self, authorization: str | None) -> str:
        """The owner of the key in an ``Authorization`` header value; UnauthorizedError otherwise."""
        if not self.entries:
            return ""
        if authorization is None:
            raise UnauthorizedError(
                "This service needs an API key: send it as 'Authorization: Bearer <key>'."
            )
        scheme, _, key = authorization.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise UnauthorizedError(
                "The Authorization header must be 'Bearer <key>'.",
                challenge='Bearer realm="mst", error="invalid_request"',
            )
        presented = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
        found: str | None = None
        for digest, owner in self.entries:  # every entry, match or not: no early exit
            if hmac.compare_digest(presented, digest) and found is None:
                found = owner
        if found is None:
            raise UnauthorizedError(
                "The API key is not valid; check it, or ask the operator for one.",
                challenge='Bearer realm="mst", error="invalid_token"',
            )
        return found


def owner_of(scope: Scope) -> str:
    """The caller of a request that :class:`AuthMiddleware` let in (KeyError if it did not run)."""
    owner: str = scope[SCOPE_KEY]
    return owner


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return str(value.decode("latin-1"))
    return None


class AuthMiddleware:
    """Lets in requests with a configured key (or all, with no keys), recording their owner."""

    def __init__(self, app: ASGIApp, keys: KeyRing) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if not self.keys.enabled or scope["path"] in OPEN_PATHS:
                scope[SCOPE_KEY] = ""
            else:
                try:
                    scope[SCOPE_KEY] = self.keys.owner(_authorization(scope))
                except UnauthorizedError as exc:
                    response = await service_error_response(Request(scope, receive), exc)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)
