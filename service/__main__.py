"""``python -m service`` / ``mst-service``: run the service (settings from ``MST_*`` variables).

This module imports only the standard library at its top, so that worker 0 can start before the
web framework is imported. :func:`main` reads the settings; with one API process
(``MST_API_WORKERS`` resolved to 1) it begins the supervisor (worker 0 and the GPU probe spawned,
:meth:`service.runtime.supervisor.supervisor.Supervisor.begin`) and only then imports and builds
the app, which serves with uvicorn while the worker starts; with several it runs the supervisor
as a process of its own (:func:`service.runtime.supervisor.service.run_service`), which spawns
the API processes on one listening socket.
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
    processes = settings.api_processes
    if processes > 1:
        import asyncio

        from .runtime.supervisor.service import run_service

        asyncio.run(run_service(settings, processes, "service.app:serve_api"))
        return 0
    from .runtime.supervisor.supervisor import Supervisor

    supervisor = Supervisor(settings, api_slots=1)
    supervisor.begin()  # worker 0 starts while the app is imported and built
    import uvicorn

    from .app import create_app
    from .one_write import OneWriteProtocol

    app = create_app(settings, supervisor)
    uvicorn.run(
        app,
        http=OneWriteProtocol,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.log_level == "debug",
        timeout_graceful_shutdown=10,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
