"""Write the app's OpenAPI document to ``openapi/openapi.json``, or check that it is up to date.

python -m service.openapi_export           # (re)write openapi/openapi.json
python -m service.openapi_export --check   # exit 1, with a diff, when it differs from the code
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

from .app import create_app
from .settings import Settings

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "openapi" / "openapi.json"


def render() -> str:
    """The OpenAPI document of the app, as stable, diff-friendly JSON text."""
    app = create_app(Settings.model_construct())  # defaults only: the document never depends on MST_*
    return json.dumps(app.openapi(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.openapi_export", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from the code")
    parser.add_argument("--output", type=Path, default=DEFAULT_PATH, help=f"default {DEFAULT_PATH}")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current == text:
            print(f"{args.output} is up to date.")
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(
                current.splitlines(True), text.splitlines(True), str(args.output), "from the code"
            )
        )
        print(f"\n{args.output} is out of date: run python -m service.openapi_export", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
