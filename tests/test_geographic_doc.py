"""docs/geographic.md's example runs as written (airports from ``airportsdata``, haversine HDBSCAN*,
the scatter plot) and renders its figure; the clusters it draws are great-circle ones."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "geographic.md"


def example() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1, "the page holds one example"
    return blocks[0]


@pytest.mark.slow
def test_the_geographic_example_renders_its_figure(tmp_path: Path) -> None:
    pytest.importorskip("airportsdata")
    pytest.importorskip("matplotlib")
    figure = tmp_path / "airports.png"
    scope: dict[str, object] = {"BACKEND": "cpu", "FIGURE": figure}
    exec(compile(example(), str(PAGE), "exec"), scope)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 20_000
    labels, points = scope["labels"], scope["points"]
    assert isinstance(labels, np.ndarray) and isinstance(points, np.ndarray)
    assert 10 <= labels.max() + 1 <= 500 and (labels >= 0).mean() > 0.3
    # a cluster is a region of the sphere: its points lie within 6,000 km of their mean direction
    from gpu_core._points.metrics import unit_vectors

    xyz = unit_vectors(points)
    for label in range(int(labels.max()) + 1):
        members = xyz[labels == label]
        centre = members.mean(axis=0) / np.linalg.norm(members.mean(axis=0))
        angles = np.arccos(np.clip(members @ centre, -1.0, 1.0))
        assert angles.max() * 6371.0 < 6000.0, label
