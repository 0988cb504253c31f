"""``gpu_core`` has one public surface: ``__all__`` lists every public name, sorted (httpx style)."""

from __future__ import annotations

import re
import tomllib
import types
from pathlib import Path

import gpu_core
from gpu_core import errors

#: the public surface, written out: a name added, moved out or dropped is a change of the library's
#: API, made here on purpose (the modules behind the names may move freely)
PUBLIC = [
    "FORMATS",
    "HDBSCAN",
    "MAX_DIMENSIONS",
    "MAX_VERTICES",
    "METRICS",
    "OBJECTIVES",
    "WEIGHT_DTYPES",
    "Backend",
    "CondensedTree",
    "EuclideanTree",
    "Graph",
    "HDBSCANResult",
    "MemoryEstimate",
    "MinimumSpanningTree",
    "NotFittedError",
    "PointIndex",
    "PointTree",
    "PredictionData",
    "ShardForest",
    "SingleLinkageTree",
    "SpanningForest",
    "all_points_membership_vectors",
    "approximate_predict",
    "build_point_index",
    "edge_ranges",
    "errors",
    "estimate_device_bytes",
    "estimate_point_set_bytes",
    "euclidean_mst",
    "formats",
    "gpu_available",
    "hdbscan",
    "linkage_from_sorted_edges",
    "make_forest",
    "maximum_spanning_forest",
    "membership_vector",
    "merge_shard_forests",
    "metric_mst",
    "minimum_spanning_forest",
    "minimum_spanning_tree",
    "read_graph",
    "resolve_backend",
    "shard_forest",
    "sharded_spanning_forest",
    "single_linkage",
    "union_graph",
    "warm_up",
]


def isort_key(name: str) -> tuple[int, list[int | str]]:
    """The order ruff's RUF022 calls "isort-style": CONSTANTS, then Classes, then the rest,
    each group in natural order."""
    if name.isupper() and len(name) > 1:
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    natural = [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
    return group, natural


def public_names(module: types.ModuleType) -> list[str]:
    return [name for name in vars(module) if not name.startswith("_")]


def test_all_is_sorted() -> None:
    for module in (gpu_core, errors):
        assert module.__all__ == sorted(module.__all__, key=isort_key), module.__name__
        assert len(set(module.__all__)) == len(module.__all__), module.__name__


def test_all_is_the_pinned_public_surface() -> None:
    assert gpu_core.__all__ == PUBLIC


def test_all_imports_are_exported() -> None:
    """Every public name of the package (submodules included) is in ``__all__``, and nothing else."""
    public, exported = set(public_names(gpu_core)), set(gpu_core.__all__)
    assert public == exported, (
        f"public but not in __all__: {sorted(public - exported)}; "
        f"in __all__ but not public: {sorted(exported - public)}"
    )


def test_every_exported_name_exists() -> None:
    for name in gpu_core.__all__:
        assert getattr(gpu_core, name) is not None, name


def test_errors_module_exports_its_error_classes() -> None:
    defined = [
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    ]
    assert sorted(errors.__all__) == sorted(defined)


def test_version_matches_the_project() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert gpu_core.__version__ == pyproject["project"]["version"]
