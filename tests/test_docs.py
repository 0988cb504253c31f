"""The documentation holds together: every relative link of README.md and docs/*.md reaches a file
that exists (and, with a ``#fragment``, a heading of that file), and the generated parts
(docs/settings.md, the tables from bench/results/) are what tools/docs_gen.py makes now."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _docs_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "tools" / "docs_gen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """``text`` without code blocks and inline code, where a link is only an example."""
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _FENCE.sub("", path.read_text(encoding="utf-8")), re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_slug_is_githubs() -> None:
    assert slug("Graphs larger than one worker: sharding") == "graphs-larger-than-one-worker-sharding"
    assert slug("HDBSCAN* estimator (library)") == "hdbscan-estimator-library"
    assert slug("Docker (GPU hosts)") == "docker-gpu-hosts"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target}: no heading #{fragment} in {path.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_every_doc_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {Path(t.partition("#")[0]).name for t in _LINK.findall(readme) if t.startswith("docs/")}
    # docs/prediction.md and others may join: each must be reachable from the README
    assert {p.name for p in DOCS[1:]} <= linked


def test_readme_stays_short() -> None:
    # issue 23: a README a newcomer reads in ten minutes; the rest lives under docs/
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 400


def test_generated_docs_are_current() -> None:
    stale = _docs_gen().stale()
    assert not stale, f"stale: {stale}; run `python tools/docs_gen.py --write`"


def test_settings_doc_lists_every_setting_with_its_default() -> None:
    from service.settings import Settings

    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `MST_([A-Z0-9_]+)` \| ([^|]+) \|", text, re.M))
    assert set(rows) == {name.upper() for name in Settings.model_fields}
    assert rows["PORT"].strip() == "`8000`"
    assert rows["MAX_UPLOAD_BYTES"].strip() == "`4294967296` (4 GiB)"
    assert rows["API_KEYS"].strip() == "unset"


def test_scaling_table_has_every_shape_of_its_records() -> None:
    # issue 25: the figure to plan with is each client on its own graph (no shared computation)
    gen = _docs_gen()
    rows = gen.scaling_table().splitlines()[2:]
    shapes = sum(len(gen._load(run)["shapes"]) for run in gen.SCALING_RUNS.values())
    assert len(rows) == shapes
    assert rows[0].startswith("| one H200") and "| 1 x 1 |" in rows[0]


def test_native_table_ends_with_the_geometric_mean() -> None:
    rows = _docs_gen().native_table().splitlines()
    assert len(rows) == 2 + 7 + 1 and rows[-1].startswith("| geometric mean of the seven")
