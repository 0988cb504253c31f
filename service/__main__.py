"""``python -m service`` / ``mst-service``: run the API with uvicorn (settings from ``MST_*`` variables).

This module imports only the standard library at its top, so that worker 0 can start before the
web framework is imported: :func:`main` reads the settings, spawns worker 0 and the GPU probe
(:func:`service.runtime.pool.head_start.begin`), and only then imports and builds the app, while
the worker starts.
"""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Start the service; returns the process exit code."""
    from pydantic import ValidationError

    from .settings import Settings, retired_settings

    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__.splitlines()[0])
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
    head_start = None
    if settings.worker_pool == "local":
        from .runtime.pool.head_start import begin

        head_start = begin(settings)  # worker 0 starts while the app is imported and built
    import uvicorn

    from .app import create_app

    app = create_app(settings, head_start)
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
