"""``python -m service`` / ``mst-service``: run the API with uvicorn (settings from ``MST_*`` variables)."""

from __future__ import annotations

import logging
import os
import sys

import uvicorn
from pydantic import ValidationError

from .app import create_app
from .settings import Settings, retired_settings


def main(argv: list[str] | None = None) -> int:
    """Start the service; returns the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        for name, field in Settings.model_fields.items():
            print(f"  MST_{name.upper():<26} {field.description} (default {field.default!r})")
        return 0
    try:
        settings = Settings()
    except ValidationError as exc:
        # without the values given: one of them may be an API key
        problems = [
            f"  MST_{str(error['loc'][0]).upper() if error['loc'] else 'settings'}: {error['msg']}"
            for error in exc.errors(include_input=False, include_url=False)
        ]
        print("mst-service: invalid settings:\n" + "\n".join(problems), file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for warning in retired_settings(os.environ):
        logging.getLogger("service").warning(warning)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.log_level == "debug",
        timeout_graceful_shutdown=10,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
