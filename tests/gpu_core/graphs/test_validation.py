"""Every validation error: its class, the field and edge index it names, its message, pickling.

The same bodies run on both backends: the GPU backend validates on the device and
must report the same errors as the CPU backend.
"""

from __future__ import annotations

import pickle
import re
from typing import Any

import numpy as np
import pytest

import gpu_core
from gpu_core import Backend, errors
from gpu_core.errors import (
    BackendUnavailableError,
    EdgeListShapeError,
    GraphTooLargeError,
    GraphValidationError,
    MSTError,
    NonFiniteWeightError,
    UnsupportedDtypeError,
    VertexIdError,
)
from tests.utils.backends import BACKENDS

SRC = np.array([0, 1, 2, 3, 4, 0], dtype=np.int64)
DST = np.array([1, 2, 3, 4, 0, 2], dtype=np.int64)
W = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])


def build(backend: Backend, src: Any = SRC, dst: Any = DST, weight: Any = W, num_vertices: Any = None) -> Any:
    return gpu_core.Graph(src, dst, weight, num_vertices, backend=backend)


def raises(
    backend: Backend, cls: type[GraphValidationError], *args: Any, **kwargs: Any
) -> GraphValidationError:
    """Build on ``backend`` and return the error; the one-shot function must raise the same."""
    with pytest.raises(cls) as info:
        build(backend, *args, **kwargs)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, MSTError)
    names = ("src", "dst", "weight", "num_vertices")
    call = dict(zip(names, (SRC, DST, W, None), strict=True)) | dict(zip(names, args, strict=False)) | kwargs
    with pytest.raises(cls) as again:
        gpu_core.minimum_spanning_forest(
            call["src"], call["dst"], call["weight"], num_vertices=call["num_vertices"], backend=backend
        )
    assert (type(again.value), str(again.value)) == (type(err), str(err))
    assert str(err).endswith("."), "messages are full sentences"
    return err


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize("field", ["src", "dst", "weight"])
@pytest.mark.parametrize("shape", [(6, 1), (2, 3), ()])
@pytest.mark.parametrize("backend", BACKENDS)
def test_arrays_must_be_one_dimensional(backend: Backend, field: str, shape: tuple[int, ...]) -> None:
    arrays = {"src": SRC, "dst": DST, "weight": W}
    arrays[field] = arrays[field][: int(np.prod(shape))].reshape(shape)
    err = raises(backend, EdgeListShapeError, arrays["src"], arrays["dst"], arrays["weight"])
    assert err.field == field and err.index is None
    assert field in str(err) and "one-dimensional" in str(err) and str(shape) in str(err)


@pytest.mark.parametrize("lengths", [(6, 6, 5), (6, 5, 6), (5, 6, 6), (0, 6, 6)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_arrays_must_have_equal_lengths(backend: Backend, lengths: tuple[int, int, int]) -> None:
    a, b, c = lengths
    err = raises(backend, EdgeListShapeError, SRC[:a], DST[:b], W[:c])
    assert err.index is None and err.field in ("src", "dst", "weight")
    assert all(str(x) in str(err) for x in lengths)
    assert "same length" in str(err)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ragged_input_is_a_validation_error(backend: Backend) -> None:
    with pytest.raises(GraphValidationError) as info:
        build(backend, [[0, 1], [2]], [1, 2], [1.0, 2.0])
    assert info.value.field == "src"


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("field", ["src", "dst"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bool", "complex128"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_vertex_ids_must_be_integers(backend: Backend, field: str, dtype: str) -> None:
    arrays = {"src": SRC, "dst": DST}
    arrays[field] = arrays[field].astype(dtype)
    err = raises(backend, UnsupportedDtypeError, arrays["src"], arrays["dst"], W)
    assert err.field == field and err.index is None
    assert field in str(err) and "integer" in str(err) and str(np.dtype(dtype)) in str(err)


@pytest.mark.parametrize("field", ["src", "dst"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_string_vertex_ids_are_rejected(backend: Backend, field: str) -> None:
    arrays = {"src": SRC, "dst": DST}
    arrays[field] = arrays[field].astype(str)
    err = raises(backend, UnsupportedDtypeError, arrays["src"], arrays["dst"], W)
    assert err.field == field


UNSUPPORTED_WEIGHTS = {
    "int8": W.astype(np.int8),
    "int16": W.astype(np.int16),
    "uint8": W.astype(np.uint8),
    "uint32": W.astype(np.uint32),
    "uint64": W.astype(np.uint64),
    "float16": W.astype(np.float16),
    "bool": W > 2,
    "complex128": W.astype(np.complex128),
    "object": W.astype(object),
    "str": W.astype(str),
}


@pytest.mark.parametrize("name", UNSUPPORTED_WEIGHTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_unsupported_weight_dtypes(backend: Backend, name: str) -> None:
    weight = UNSUPPORTED_WEIGHTS[name]
    err = raises(backend, UnsupportedDtypeError, SRC, DST, weight)
    assert err.field == "weight" and err.index is None
    message = str(err)
    assert "weight" in message
    for supported in gpu_core.WEIGHT_DTYPES:  # says what would be accepted
        assert str(supported) in message


@pytest.mark.parametrize("backend", BACKENDS)
def test_supported_weight_dtypes_are_exactly_four(backend: Backend) -> None:
    assert [d.name for d in gpu_core.WEIGHT_DTYPES] == ["int32", "int64", "float32", "float64"]
    for dtype in gpu_core.WEIGHT_DTYPES:
        assert build(backend, SRC, DST, W.astype(dtype)).weight_dtype == dtype


# ---------------------------------------------------------------- weights


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index", [0, 3, 5])
@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_weights_name_the_edge(backend: Backend, bad: float, dtype: str, index: int) -> None:
    weight = W.astype(dtype)
    weight[index] = bad
    if index < 5:
        weight[5] = np.nan  # a later bad edge: the first one is reported
    err = raises(backend, NonFiniteWeightError, SRC, DST, weight)
    assert (err.field, err.index) == ("weight", index)
    assert f"weight[{index}]" in str(err) and "finite" in str(err)
    assert str(bad) in str(err)


# ---------------------------------------------------------------- vertex ids


@pytest.mark.parametrize("field", ["src", "dst"])
@pytest.mark.parametrize("bad", [-1, 6, -(2**40), 2**40])
@pytest.mark.parametrize("backend", BACKENDS)
def test_vertex_ids_out_of_range_name_field_and_index(backend: Backend, field: str, bad: int) -> None:
    arrays = {"src": SRC.copy(), "dst": DST.copy()}
    arrays[field][4] = bad
    arrays[field][5] = bad  # a later bad edge: the first one is reported
    err = raises(backend, VertexIdError, arrays["src"], arrays["dst"], W, 6)
    assert (err.field, err.index) == (field, 4)
    assert f"{field}[4]" in str(err) and str(bad) in str(err) and "[0, 6)" in str(err)


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_id_without_num_vertices(backend: Backend) -> None:
    dst = DST.copy()
    dst[2] = -3
    err = raises(backend, VertexIdError, SRC, dst, W)
    assert (err.field, err.index) == ("dst", 2) and "-3" in str(err)


@pytest.mark.parametrize("backend", BACKENDS)
def test_uint64_ids_beyond_int64(backend: Backend) -> None:
    src = SRC.astype(np.uint64)
    src[1] = np.uint64(2**63 + 5)
    err = raises(backend, VertexIdError, src, DST, W)
    assert (err.field, err.index) == ("src", 1) and str(2**63 + 5) in str(err)


@pytest.mark.parametrize("backend", BACKENDS)
def test_num_vertices_smaller_than_largest_id(backend: Backend) -> None:
    err = raises(backend, VertexIdError, SRC, DST, W, 4)  # ids go up to 4
    assert (err.field, err.index) == ("src", 4)
    assert "num_vertices = 4" in str(err) and "src[4]" in str(err)


@pytest.mark.parametrize("value", [-1, -(2**40)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_num_vertices_negative(backend: Backend, value: int) -> None:
    err = raises(backend, GraphValidationError, SRC, DST, W, value)
    assert err.field == "num_vertices" and "non-negative" in str(err) and str(value) in str(err)


@pytest.mark.parametrize("value", [5.0, 6.0, "6", True, [6], np.float64(6)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_num_vertices_must_be_an_integer(backend: Backend, value: Any) -> None:
    err = raises(backend, GraphValidationError, SRC, DST, W, value)
    assert err.field == "num_vertices" and "integer" in str(err) and repr(value) in str(err)


@pytest.mark.parametrize("value", [6, 10, np.int64(6), np.uint32(9)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_num_vertices_accepts_integers(backend: Backend, value: Any) -> None:
    assert build(backend, num_vertices=value).num_vertices == int(value)


# ---------------------------------------------------------------- the error tree


def test_error_tree() -> None:
    for invalid in (EdgeListShapeError, UnsupportedDtypeError, VertexIdError, NonFiniteWeightError):
        assert issubclass(invalid, GraphValidationError)
    for bad_input in (GraphValidationError, GraphTooLargeError):
        assert issubclass(bad_input, ValueError) and issubclass(bad_input, MSTError)
    assert issubclass(BackendUnavailableError, RuntimeError) and issubclass(BackendUnavailableError, MSTError)
    classes = [getattr(errors, name) for name in errors.__all__]
    assert all(issubclass(c, MSTError) for c in classes)
    codes = [c.code for c in classes]
    assert len(set(codes)) == len(codes), "every error class has its own code"
    assert all(c.__doc__ and c.__doc__.strip() for c in classes)


def _raised_errors() -> list[MSTError]:
    found: list[MSTError] = []
    bad_src = SRC.copy()
    bad_src[3] = 99
    bad_w = W.copy()
    bad_w[2] = np.nan
    for args in ((bad_src, DST, W, 6), (SRC, DST, bad_w), (SRC, DST[:2], W), (SRC, DST, W.astype(np.int16))):
        try:
            gpu_core.Graph(*args, backend="cpu")
        except MSTError as exc:
            found.append(exc)
    assert len(found) == 4
    return found


def _constructed_errors() -> list[MSTError]:
    made: list[MSTError] = []
    for name in errors.__all__:
        cls = getattr(errors, name)
        if issubclass(cls, GraphValidationError):
            made.append(cls(f"{name} happened.", field="weight", index=7))
        elif cls is GraphTooLargeError:
            made.append(cls("too large.", limit=2**31 - 1, actual=2**31))
        else:
            made.append(cls(f"{name} happened."))
    return made


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_errors_survive_pickling(protocol: int) -> None:
    for err in _raised_errors() + _constructed_errors():
        copy = pickle.loads(pickle.dumps(err, protocol=protocol))
        assert type(copy) is type(err)
        assert str(copy) == str(err) and copy.args == err.args
        assert copy.__dict__ == err.__dict__
        assert copy.code == err.code
        for attr in ("field", "index", "limit", "actual", "message"):
            assert getattr(copy, attr, None) == getattr(err, attr, None)


def test_pickled_fields_are_the_real_ones() -> None:
    err = pickle.loads(pickle.dumps(_raised_errors()[0]))
    assert isinstance(err, VertexIdError) and isinstance(err, ValueError)
    assert (err.field, err.index) == ("src", 3) and "src[3]" in str(err)
    too_large = pickle.loads(pickle.dumps(GraphTooLargeError("over.", limit=5, actual=9)))
    assert (too_large.limit, too_large.actual) == (5, 9)


# ---------------------------------------------------------------- backends and call forms


def test_gpu_backend_without_a_gpu_is_a_clear_error() -> None:
    if gpu_core.gpu_available():
        pytest.skip("a GPU is available here; this checks the behaviour without one")
    for call in (
        lambda: gpu_core.Graph(SRC, DST, W, backend="gpu"),
        lambda: gpu_core.minimum_spanning_forest(SRC, DST, W, backend="gpu"),
        lambda: gpu_core.resolve_backend("gpu"),
        lambda: gpu_core.warm_up("gpu"),
    ):
        with pytest.raises(BackendUnavailableError, match=r"backend='gpu'") as info:
            call()
        assert isinstance(info.value, RuntimeError) and not isinstance(info.value, ValueError)
    cpu_graph = gpu_core.Graph(SRC, DST, W, backend="cpu")
    with pytest.raises(BackendUnavailableError):
        gpu_core.minimum_spanning_forest(cpu_graph, backend="gpu")


@pytest.mark.gpu
def test_graph_on_one_backend_refuses_the_other() -> None:
    cpu_graph = gpu_core.Graph(SRC, DST, W, backend="cpu")
    gpu_graph = gpu_core.Graph(SRC, DST, W, backend="gpu")
    with pytest.raises(ValueError, match="backend"):
        gpu_core.minimum_spanning_forest(cpu_graph, backend="gpu")
    with pytest.raises(ValueError, match="backend"):
        gpu_core.minimum_spanning_forest(gpu_graph, backend="cpu")


@pytest.mark.gpu
def test_gpu_index_limits_are_checked_up_front() -> None:
    empty = np.empty(0, dtype=np.int64)
    with pytest.raises(GraphTooLargeError) as info:
        gpu_core.Graph(empty, empty, np.empty(0), num_vertices=2**31, backend="gpu")
    err = info.value
    assert isinstance(err, ValueError) and (err.limit, err.actual) == (2**31 - 1, 2**31)
    assert str(2**31 - 1) in str(err)


@pytest.mark.parametrize("name", ["GPU", "cuda", "", "numpy", None, "auto "])
def test_unknown_backend_names(name: Any) -> None:
    for call in (
        lambda: gpu_core.Graph(SRC, DST, W, backend=name),
        lambda: gpu_core.minimum_spanning_forest(SRC, DST, W, backend=name),
        lambda: gpu_core.resolve_backend(name),
        lambda: gpu_core.warm_up(name),
    ):
        with pytest.raises(ValueError, match=re.escape(repr(name))) as info:
            call()
        assert "auto" in str(info.value) and "cpu" in str(info.value) and "gpu" in str(info.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_plus_arrays_is_a_type_error(backend: Backend) -> None:
    graph = build(backend)
    for kwargs in ({"dst": DST}, {"weight": W}, {"dst": DST, "weight": W}, {"num_vertices": 6}):
        with pytest.raises(TypeError, match="Graph"):
            gpu_core.minimum_spanning_forest(graph, **kwargs)
    with pytest.raises(TypeError):
        gpu_core.minimum_spanning_forest(graph, DST, W)


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_arrays_is_a_type_error(backend: Backend) -> None:
    with pytest.raises(TypeError, match="three"):
        gpu_core.minimum_spanning_forest(SRC, DST, backend=backend)
    with pytest.raises(TypeError, match="three"):
        gpu_core.minimum_spanning_forest(SRC, weight=W, backend=backend)
