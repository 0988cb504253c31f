"""``python -m service`` / ``mst-service``: run the API with uvicorn (settings from ``MST_*`` variables)."""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import ValidationError

from .app import create_app
from .runtime.fronts import RunPaths, RuntimeServer, bind_unix
from .settings import Settings


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
    if settings.api_processes > 1:
        return _serve_with_fronts(settings)
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


def _serve_with_fronts(settings: Settings) -> int:
    """The runtime process: the app on a private Unix socket; its lifespan starts the fronts."""
    paths = RunPaths.make(settings)
    sock = bind_unix(paths.api)
    app = create_app(settings, fronts=paths)
    config = uvicorn.Config(
        app,
        log_level=settings.log_level,
        access_log=settings.log_level == "debug",
        timeout_graceful_shutdown=10,
    )
    # the lifespan's end removes the sockets (uvicorn ends the process by raising SIGTERM again)
    RuntimeServer(config, lambda: app.state.front_processes).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
