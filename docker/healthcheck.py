#!/usr/bin/env python3
"""Container health check: exit 0 when the service's ``/readyz`` answers 200, 1 otherwise.

Used by the Dockerfile's ``HEALTHCHECK`` and by docker-compose.yml. The image has no curl, and this
needs only the standard library, so it runs with any Python 3. ``/readyz`` is 200 only while a
worker is up and its device answers, so a container whose GPU worker keeps failing turns unhealthy.

    python3 docker/healthcheck.py [URL]

URL defaults to ``http://127.0.0.1:$MST_PORT/readyz`` (port 8000 when MST_PORT is unset); the
timeout is ``$MST_HEALTHCHECK_TIMEOUT_S`` seconds (default 4).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def default_url() -> str:
    port = os.environ.get("MST_PORT", "8000").strip() or "8000"
    return f"http://127.0.0.1:{port}/readyz"


def check(url: str, timeout: float) -> tuple[bool, str]:
    """Return whether ``url`` answered 200, and a one-line reason for the health log."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:  # 4xx/5xx: the server is up but not ready
        return False, f"{url} answered {exc.code} (not ready)"
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return False, f"{url} unreachable: {reason}"
    if status != 200:
        return False, f"{url} answered {status} (not ready)"
    return True, f"{url} answered 200 (ready)"


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else default_url()
    try:
        timeout = float(os.environ.get("MST_HEALTHCHECK_TIMEOUT_S", "4"))
    except ValueError:
        timeout = 4.0
    ok, message = check(url, timeout)
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
