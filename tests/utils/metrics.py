"""Point sets and oracles for the metrics' tests: every metric of issue 45 with SciPy's name for it,
tie-free generated data, real data no one here wrote (scikit-learn's bundled data sets; airports'
coordinates from the ``airportsdata`` package for haversine), and exact distance matrices."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

#: (our metric, metric_params, SciPy's pdist name and keywords): every metric with coordinates
CASES: list[tuple[str, dict[str, Any] | None, str, dict[str, Any]]] = [
    ("euclidean", None, "euclidean", {}),
    ("manhattan", None, "cityblock", {}),
    ("chebyshev", None, "chebyshev", {}),
    ("minkowski", {"p": 3}, "minkowski", {"p": 3}),
    ("minkowski", {"p": 1.5}, "minkowski", {"p": 1.5}),
    ("cosine", None, "cosine", {}),
]
#: metrics whose single-linkage heights equal SciPy's bit for bit (the same float operations)
EXACT_HEIGHTS = ("euclidean", "manhattan", "chebyshev")


def case_id(case: tuple[Any, ...]) -> str:
    metric, params = case[0], case[1]
    return metric + (f"-p{params['p']}" if params else "")


def blobs(n: int, d: int, seed: int, centers: int = 5) -> np.ndarray:
    """Clusters of random floats with noise around them: no two distances equal."""
    rng = np.random.default_rng(seed)
    middle = rng.uniform(-10, 10, size=(centers, d))
    parts = [c + rng.normal(scale=rng.uniform(0.4, 1.2), size=(n // (centers + 1), d)) for c in middle]
    noise = rng.uniform(-12, 12, size=(n - sum(p.shape[0] for p in parts), d))
    return np.ascontiguousarray(np.concatenate([*parts, noise]))


def lat_lon(n: int, seed: int) -> np.ndarray:
    """Random (latitude, longitude) rows in radians, in a few clusters and noise."""
    rng = np.random.default_rng(seed)
    centres = np.column_stack((rng.uniform(-1.2, 1.2, 6), rng.uniform(-3.0, 3.0, 6)))
    parts = [c + rng.normal(scale=0.05, size=(n // 8, 2)) for c in centres]
    noise = np.column_stack(
        (rng.uniform(-1.5, 1.5, n - 6 * (n // 8)), rng.uniform(-3.1, 3.1, n - 6 * (n // 8)))
    )
    return np.ascontiguousarray(np.concatenate([*parts, noise]))


def airports(code: Literal["IATA", "ICAO"] = "IATA") -> np.ndarray:
    """Every airport of ``airportsdata`` (IATA: about 7,900; ICAO: about 28,000) as (latitude,
    longitude) radians, duplicates of a location dropped."""
    import airportsdata

    rows = np.array([(a["lat"], a["lon"]) for a in airportsdata.load(code).values()], dtype=np.float64)
    return np.ascontiguousarray(np.radians(np.unique(rows, axis=0)))


def real_data() -> dict[str, np.ndarray]:
    """scikit-learn's bundled data sets, jittered by a relative 1e-9 so that no two distances tie
    (their values are rounded to a few digits: many exact ties otherwise)."""
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine

    rng = np.random.default_rng(0)
    out = {}
    for name, loader in (("iris", load_iris), ("wine", load_wine), ("breast_cancer", load_breast_cancer)):
        x = loader().data.astype(np.float64)
        x = x / x.std(axis=0)
        out[name] = np.ascontiguousarray(x * (1.0 + 1e-9 * rng.standard_normal(x.shape)))
    return out


def cosine_matrix(x: np.ndarray) -> np.ndarray:
    """1 - cos by its definition, in extended precision (x86's 80-bit long double), rounded once:
    an oracle the double formula's cancellation does not blur for close points."""
    xl = x.astype(np.longdouble)
    norm = np.sqrt((xl * xl).sum(axis=1))
    c = 1 - (xl @ xl.T) / (norm[:, None] * norm[None, :])
    c = np.maximum((c + c.T) / 2, 0)
    np.fill_diagonal(c, 0)
    return c.astype(np.float64)


def bijection(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """The same partition (noise the same points), whatever the cluster numbers."""
    if not np.array_equal(ours < 0, theirs < 0):
        return False
    pairs = set(zip(ours.tolist(), theirs.tolist(), strict=True))
    return len(pairs) == len(set(ours.tolist())) == len(set(theirs.tolist()))
