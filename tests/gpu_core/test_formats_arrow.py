"""Arrow IPC and Parquet readers of gpu_core.formats: columns, dtypes, metadata, malformed input."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest

import gpu_core
from gpu_core.errors import GraphValidationError


def stream(table: pa.Table, chunk: int | None = None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return sink.getvalue()


def ipc_file(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=3)
    return sink.getvalue()


ENCODERS = {
    "arrow stream": ("arrow", stream),
    "arrow file": ("arrow", ipc_file),
    "parquet": ("parquet", parquet),
}


@pytest.mark.parametrize("encoding", ENCODERS)
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_round_trip_keeps_order_and_dtype(encoding: str, dtype: str) -> None:
    fmt, encode = ENCODERS[encoding]
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 50, 40), rng.integers(0, 50, 40)
    weight = (rng.random(40) * 100).astype(dtype)
    table = pa.table(
        {"weight": weight, "dst": dst.astype(np.int32), "src": src}, metadata={"num_vertices": "60"}
    )
    edges = gpu_core.read_graph(encode(table), fmt)
    assert edges.src.tolist() == src.tolist() and edges.dst.tolist() == dst.tolist()
    assert edges.weight.dtype == np.dtype(dtype) and edges.weight.tolist() == weight.tolist()
    assert edges.num_vertices == 60


def test_chunked_stream_and_no_metadata() -> None:
    table = pa.table({"src": [0, 1, 2, 3], "dst": [1, 2, 3, 0], "weight": [4, 3, 2, 1]})
    edges = gpu_core.read_graph(stream(table, chunk=1), "arrow")
    assert edges.weight.tolist() == [4, 3, 2, 1] and edges.num_vertices is None


@pytest.mark.parametrize(
    ("arrow_type", "dtype"),
    [(pa.int8(), "int32"), (pa.int16(), "int32"), (pa.uint8(), "int32"), (pa.uint16(), "int32"),
     (pa.uint32(), "int64"), (pa.uint64(), "int64"), (pa.float16(), "float32")],
)  # fmt: skip
def test_narrow_weights_widen_exactly(arrow_type: pa.DataType, dtype: str) -> None:
    values = [1, 2, 3] if arrow_type != pa.float16() else np.array([0.5, 1.25, 3.0], dtype=np.float16)
    table = pa.table({"src": [0, 1, 2], "dst": [1, 2, 0], "weight": pa.array(values, arrow_type)})
    edges = gpu_core.read_graph(stream(table), "arrow")
    assert edges.weight.dtype == np.dtype(dtype)
    assert edges.weight.tolist() == np.asarray(values, dtype=dtype).tolist()


@pytest.mark.parametrize(
    ("fmt", "body", "words"),
    [
        ("arrow", b"garbage", "not a valid arrow graph"),
        ("parquet", b"garbage", "not a valid parquet graph"),
        ("arrow", stream(pa.table({"src": [0], "weight": [1]})), "missing column(s) dst"),
        ("arrow", stream(pa.table({"src": [0], "dst": [1], "weight": ["x"]})), "must hold numbers"),
        ("arrow", stream(pa.table({"src": [0.5], "dst": [1], "weight": [1]})), "vertex ids"),
        ("arrow", stream(pa.table({"src": [0], "dst": [1], "weight": pa.array([2**64 - 1], pa.uint64())})),
         "beyond int64"),
        ("arrow", stream(pa.table({"src": [0], "dst": [1], "weight": [1]}, metadata={"num_vertices": "x"})),
         "'num_vertices' must be an integer"),
        ("parquet", parquet(pa.table({"src": [0, None], "dst": [1, 2], "weight": [1, 2]})), "null values"),
    ],
)  # fmt: skip
def test_malformed_tables_are_validation_errors(fmt: str, body: bytes, words: str) -> None:
    with pytest.raises(GraphValidationError) as info:
        edges = gpu_core.read_graph(body, fmt)
        gpu_core.Graph(edges.src, edges.dst, edges.weight, edges.num_vertices, backend="cpu")
    assert words in str(info.value)


def test_nulls_name_the_column_and_row() -> None:
    table = pa.table({"src": [0, 1, 2], "dst": [1, 2, 0], "weight": [1.0, None, 2.0]})
    with pytest.raises(GraphValidationError) as info:
        gpu_core.read_graph(stream(table), "arrow")
    assert info.value.field == "weight" and info.value.index == 1
