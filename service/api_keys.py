"""API keys as configured: the checks of a key and of a keys file.

Below everything that uses them: the settings' validators refuse a bad key or keys file at
start-up, and the API's key ring (:class:`service.api.auth.KeyRing`) reads the same file when
the app is built. A key is known to the service only by its SHA-256 hash.
"""

from __future__ import annotations

import re
from pathlib import Path

#: shortest key accepted: 16 characters (e.g. ``openssl rand -hex 32`` gives 64)
MIN_KEY_LENGTH = 16

_HASH_LINE = re.compile(r"([0-9a-fA-F]{64})(?:\s+([A-Za-z0-9_.@-]{1,64}))?")
_KEY_CHARS = re.compile(r"[\x21-\x7e]+")  # visible ASCII: what fits a Bearer header unchanged


def check_api_key(key: str, where: str) -> None:
    """Refuse a key that is empty, short, or not plain visible ASCII (ValueError naming ``where``)."""
    if not key:
        raise ValueError(f"{where} is empty; give keys separated by single commas.")
    if len(key) < MIN_KEY_LENGTH:
        raise ValueError(
            f"{where} has {len(key)} characters; API keys need at least {MIN_KEY_LENGTH} "
            "(make one with: openssl rand -hex 32)."
        )
    if _KEY_CHARS.fullmatch(key) is None:
        raise ValueError(f"{where} must be visible ASCII characters without spaces or commas.")


def read_key_file(path: Path) -> list[tuple[bytes, str | None]]:
    """The ``(sha256 digest, owner name or None)`` of each key line of an API keys file.

    One ``<sha256-hex> [owner]`` per line; blank lines and ``#`` comments are skipped. A hash is
    made with ``printf %s "$KEY" | sha256sum``. Raises ValueError naming the line at fault.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"MST_API_KEYS_FILE {path} cannot be read: {exc}") from None
    keys: list[tuple[bytes, str | None]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _HASH_LINE.fullmatch(line)
        if match is None:
            raise ValueError(
                f"MST_API_KEYS_FILE {path} line {number}: expected '<sha256-hex> [owner]' (64 hex "
                "digits, then optionally an owner name of letters, digits and _.@-), "
                'e.g. from: printf %s "$KEY" | sha256sum'
            )
        keys.append((bytes.fromhex(match.group(1)), match.group(2)))
    if not keys:
        raise ValueError(f"MST_API_KEYS_FILE {path} holds no key; add lines or unset it.")
    return keys
