"""The documentation holds together.

- Every relative link of README.md, docs/*.md (the guides) and docs/design/*.md (the design notes)
  reaches a file that exists (and, with a ``#fragment``, a heading of that file), and every
  repository path they name in backticks exists.
- Every guide is linked from the README, every design note from the design index
  (docs/design/README.md), and the index from the README.
- Every design note names the modules that implement it, and at least one module of gpu_core or
  service names the note back (``Design: docs/design/NOTE.md``); every note a module names exists.
- The generated parts (docs/settings.md, the tables from bench/results/) are what
  tools/docs_gen.py makes now, and lie only in the files it writes.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDES = sorted((ROOT / "docs").glob("*.md"))
DESIGN_INDEX = ROOT / "docs" / "design" / "README.md"
NOTES = sorted(p for p in (ROOT / "docs" / "design").glob("*.md") if p != DESIGN_INDEX)
DOCS = [ROOT / "README.md", *GUIDES, DESIGN_INDEX, *NOTES]
#: the code a design note is implemented in and linked from
CODE = sorted(
    p
    for package in ("gpu_core", "service")
    for p in (ROOT / package).rglob("*")
    if p.suffix in {".py", ".cu", ".cuh"} and "__pycache__" not in p.parts
)

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
#: a repository path named in backticks: the whole inline code span, under a top-level folder
_NAMED_PATH = re.compile(r"`((?:gpu_core|service|bench|tests|tools|docker|openapi|\.ci)/[\w./-]*)`")
#: a path the docs name on purpose although it is not in the repository (made by the user)
_NOT_IN_REPO = {"docker/mst.env"}
_DESIGN_REF = re.compile(r"docs/design/([\w.-]+\.md)")


def _docs_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "tools" / "docs_gen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


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


def relative_links(doc: Path) -> list[str]:
    """The links of ``doc``'s prose that are not to another site (``http:``, ``mailto:``)."""
    links = _LINK.findall(_prose(doc.read_text(encoding="utf-8")))
    return [t for t in links if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(doc: Path) -> list[str]:
    broken = []
    for target in relative_links(doc):
        path_part, _, fragment = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target}: no heading #{fragment} in {_rel(path)}")
    return broken


def linked_docs(doc: Path) -> set[Path]:
    """The Markdown files ``doc`` links to."""
    found = set()
    for target in relative_links(doc):
        path_part = target.partition("#")[0]
        if path_part.endswith(".md"):
            found.add((doc.parent / path_part).resolve())
    return found


def missing_named_paths(doc: Path) -> list[str]:
    """The repository paths ``doc`` names in backticks (outside code blocks) that do not exist."""
    text = _FENCE.sub("", doc.read_text(encoding="utf-8"))
    named = {p.rstrip(".,") for p in _NAMED_PATH.findall(text)}
    return sorted(p for p in named - _NOT_IN_REPO if not (ROOT / p).exists())


def test_slug_is_githubs() -> None:
    assert slug("Graphs larger than one worker: sharding") == "graphs-larger-than-one-worker-sharding"
    assert slug("HDBSCAN* estimator (library)") == "hdbscan-estimator-library"
    assert slug("Docker (GPU hosts)") == "docker-gpu-hosts"


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    # a broken file link, a broken anchor and a missing named path are each reported
    (tmp_path / "other.md").write_text("# Only heading\n", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n\n[gone](nowhere.md), [anchor](other.md#no-such-heading), [fine](other.md#only-heading), "
        "[self](#doc), `gpu_core/no_such_module.py`, `gpu_core/_graphs/gpu.py`\n",
        encoding="utf-8",
    )
    assert [b.split(":")[0] for b in broken_links(doc)] == ["nowhere.md", "other.md#no-such-heading"]
    assert missing_named_paths(doc) == ["gpu_core/no_such_module.py"]
    assert linked_docs(doc) == {(tmp_path / "nowhere.md").resolve(), (tmp_path / "other.md").resolve()}


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_relative_links_resolve(doc: Path) -> None:
    broken = broken_links(doc)
    assert not broken, f"{_rel(doc)}:\n" + "\n".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_named_paths_exist(doc: Path) -> None:
    missing = missing_named_paths(doc)
    assert not missing, f"{_rel(doc)} names paths that do not exist: {missing}"


def test_every_guide_is_linked_from_the_readme() -> None:
    linked = linked_docs(ROOT / "README.md")
    assert {p.resolve() for p in GUIDES} - linked == set()
    assert DESIGN_INDEX.resolve() in linked, "the README must link the design notes' index"


def test_every_design_note_is_in_the_index() -> None:
    assert NOTES, "docs/design/ holds no notes"
    unlisted = {p.resolve() for p in NOTES} - linked_docs(DESIGN_INDEX)
    assert not unlisted, f"docs/design/README.md does not link {sorted(_rel(p) for p in unlisted)}"


def implementing_modules(note: Path) -> list[str]:
    """The modules of gpu_core and service a design note names under its '## Implemented in'."""
    text = note.read_text(encoding="utf-8")
    if "\n## Implemented in\n" not in text:
        return []
    section = text.split("\n## Implemented in\n", 1)[1].split("\n## ", 1)[0]
    return [p for p in _NAMED_PATH.findall(section) if p.startswith(("gpu_core/", "service/"))]


@pytest.mark.parametrize("note", NOTES, ids=_rel)
def test_design_note_names_its_modules(note: Path) -> None:
    # the paths named must exist too: test_named_paths_exist
    assert implementing_modules(note), (
        f"{_rel(note)} names no module of gpu_core or service in an '## Implemented in' section"
    )


def _design_refs() -> dict[str, set[str]]:
    """Each design note named in code, and the code files that name it."""
    refs: dict[str, set[str]] = {}
    for path in CODE:
        for name in _DESIGN_REF.findall(path.read_text(encoding="utf-8")):
            refs.setdefault(name, set()).add(_rel(path))
    return refs


@pytest.mark.parametrize("note", NOTES, ids=_rel)
def test_design_note_is_linked_from_code(note: Path) -> None:
    # by a module the note names as implementing it (others may point at it too, e.g. settings)
    implementing = set(implementing_modules(note))
    naming = _design_refs().get(note.name, set())
    assert naming & implementing, (
        f"none of the modules {_rel(note)} names ({sorted(implementing)}) names docs/design/{note.name} "
        f"in its docstring or header (named by: {sorted(naming) or 'no module'})"
    )


def test_code_names_only_existing_notes() -> None:
    existing = {p.name for p in NOTES}
    stale = {name: files for name, files in _design_refs().items() if name not in existing}
    assert not stale, f"code names design notes that do not exist: {stale}"


def test_readme_stays_short() -> None:
    # issue 23: a README a newcomer reads in ten minutes; the rest lives under docs/
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 400


def test_generated_docs_are_current() -> None:
    stale = _docs_gen().stale()
    assert not stale, f"stale: {stale}; run `python tools/docs_gen.py --write`"


def test_generated_blocks_only_where_docs_gen_writes_them() -> None:
    # a marked block anywhere else would never be generated again
    marked = {p.resolve() for p in _docs_gen().MARKED_FILES}
    stray = [
        _rel(p)
        for p in DOCS
        if p.resolve() not in marked and "<!-- generated: " in _prose(p.read_text(encoding="utf-8"))
    ]
    assert not stray, f"generated blocks outside tools/docs_gen.py's MARKED_FILES: {stray}"


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
