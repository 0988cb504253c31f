"""One Markdown row per jobs record: ``python bench/results/jobs-h200/summarize.py FILE.json...``."""

import json
import pathlib
import sys

HEAD = (
    "| run | settings | 1 client jobs/s (p50/p99 ms) | 8 | 64 | 256 | one-shot, 64 clients, req/s "
    "(p50/p99 ms) | forests checked | wrong | errors |"
)


def row(path: pathlib.Path) -> str:
    record = json.loads(path.read_text())["benchmarks"]["jobs"]
    levels = {level["clients"]: level for level in record["levels"]}
    oneshot = record["oneshot"]
    every = [*record["levels"], oneshot]
    cells = [path.stem, str(record.get("settings") or "defaults")]
    for clients in (1, 8, 64, 256):
        level = levels[clients]
        cells.append(f"{level['per_s']:.0f} ({level['p50_ms']:.1f}/{level['p99_ms']:.1f})")
    cells.append(f"{oneshot['per_s']:.0f} ({oneshot['p50_ms']:.1f}/{oneshot['p99_ms']:.1f})")
    for key in ("completed", "mismatches", "errors"):
        cells.append(str(sum(level[key] for level in every)))
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    print(HEAD)
    print("|" + " --- |" * 10)
    for name in sys.argv[1:]:
        print(row(pathlib.Path(name)))
