"""A small synchronous Python client of the service (httpx), and a CLI on top of it.

>>> with Client("http://127.0.0.1:8000", api_key=key) as mst: # doctest: +SKIP
...     graph = mst.upload_arrays(src, dst, weight)
...     job = mst.submit(graph["id"], wait=30)
...     forest = mst.result(job["id"])                          # arrays, via the binary npz
...     forest.total_weight, forest.edge_ids[:5]

``api_key``: the service's API key, sent as ``Authorization: Bearer <key>`` (not needed when the
service runs without keys). The CLI takes it from ``MST_API_KEY`` (or ``--api-key``, which other
users of the machine can see in the process list).

SciPy sparse matrices and NetworkX graphs go up with :meth:`Client.upload_graph` (or
:meth:`Client.one_shot_graph`), and their forests come back as the same kind of object with
``result(job_id, output="networkx" | "scipy")`` (see :mod:`service.client.interop`).

CLI: ``python -m service.client [--url URL] [--api-key KEY] [--progress | --no-progress] upload FILE
[--format F] | list | mst GRAPH_ID [--wait S] | job JOB_ID | result JOB_ID [--out FILE.npz]
| delete GRAPH_ID | oneshot FILE``; progress bars on stderr for transfers of 4 MB or more, by
default when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import io
import json
import mmap
import os
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np

from .interop import GraphSource, graph_source
from .progress import MIN_BYTES, ProgressBar
from .progress import wanted as progress_wanted

OCTET = "application/octet-stream"
#: what :meth:`Client.result` and :meth:`Client.one_shot_graph` can return
OUTPUTS = ("forest", "networkx", "scipy")

#: pieces a binary body is sent in. httpx sends one ``bytes`` body with ``sock.send`` and
#: ``buffer = buffer[n:]`` after each partial send, a copy of the rest every time: quadratic,
#: about 130 MB/s for a 150 MB body on loopback. Views of 4 MiB go as fast as the socket.
_PIECE = 4 << 20


def body_pieces(body: bytes, progress: ProgressBar | None = None) -> Iterator[bytes]:
    view = memoryview(body)
    try:
        for start in range(0, len(view), _PIECE):
            piece = view[start : start + _PIECE]
            yield cast(bytes, piece)  # a view: httpx sends any bytes-like piece
            if progress is not None:
                progress.update(len(piece))
    finally:
        if progress is not None:
            progress.close()


#: bytes per socket read of httpx's connections (its default, 64 KiB, is slow for large bodies)
_READ_PIECE = 1 << 20

#: bodies from this size on are received into memory the kernel may back with 2 MiB pages
_HUGE_BODY = 8 << 20


def _large_socket_reads() -> None:
    """Let httpx's HTTP/1.1 connections read up to :data:`_READ_PIECE` per socket read.

    httpcore reads 64 KiB at a time (``HTTP11Connection.READ_NUM_BYTES``, a class attribute), and
    each read goes through the HTTP parser and the stream's generators: a 25 MB forest came in
    at 410 MB/s on loopback, 1 GB/s with 1 MiB reads (a read returns what has arrived, so small
    bodies are unaffected). The whole process's httpx connections read this way afterwards.
    """
    try:
        from httpcore._sync.http11 import HTTP11Connection
    except ImportError:  # another httpcore layout: its own default
        return
    if getattr(HTTP11Connection, "READ_NUM_BYTES", _READ_PIECE) < _READ_PIECE:
        HTTP11Connection.READ_NUM_BYTES = _READ_PIECE


def receive_buffer(size: int) -> memoryview:
    """A writable buffer for a response body of ``size`` bytes.

    Fresh memory is faulted in one 4 KiB page at a time as the body lands in it, which caps a
    134 MB download at about 650 MB/s on the H200 host although the service sends it at
    3 GB/s. A large buffer is therefore an anonymous map advised to use transparent huge pages
    (Linux): 3 GB/s, as fast as into a buffer used before.
    """
    if size >= _HUGE_BODY and hasattr(mmap, "MADV_HUGEPAGE"):
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
        return memoryview(region)
    return memoryview(bytearray(size))


def read_response(
    http: httpx.Client, method: str, url: str, *, progress: bool = False, **kwargs: Any
) -> tuple[httpx.Response, bytes | memoryview]:
    """Send a request and read its body in large pieces into one buffer: (the response, the body).

    A large plain-HTTP body is read straight off the connection's socket into that buffer once
    the parser has handed over what it already holds (:func:`_socket_of`): httpx's parser copies
    every byte four times on the way, which held a 50 MB forest to about 0.8 GB/s on loopback
    where the service sends it at 2.6 GB/s. The connection is then closed, not reused (its parser
    never saw the rest of the body).

    ``progress``: a bar on stderr while a body of :data:`service.client.progress.MIN_BYTES` or more comes in.
    """
    _large_socket_reads()
    with http.stream(method, url, **kwargs) as response:
        size = int(response.headers.get("content-length", "0") or 0)
        if response.status_code >= 400 or size <= 0:
            return response, response.read()
        body = receive_buffer(size)
        filled = 0
        bar = ProgressBar("download", size) if progress and size >= MIN_BYTES else None
        for piece in response.iter_raw():
            body[filled : filled + len(piece)] = piece
            filled += len(piece)
            if bar is not None:
                bar.update(len(piece))
            sock = _socket_of(response) if filled < size and size >= _DIRECT_BODY else None
            if sock is not None:
                filled = _receive_into(sock, body, filled, http.timeout.read, bar)
                break
        if bar is not None:
            bar.close()
        if filled != size:
            raise httpx.RemoteProtocolError(f"the body has {filled} bytes, Content-Length said {size}")
        return response, body


#: bodies from this size on are read straight off the socket (:func:`read_response`)
_DIRECT_BODY = 4 << 20

#: bytes per ``recv_into``: larger reads were slower on loopback (the copy leaves the cache)
_SOCKET_PIECE = 1 << 16


def _socket_of(response: httpx.Response) -> socket.socket | None:
    """The plain TCP socket under an HTTP/1.1 response whose body comes as it is sent (no TLS,
    no transfer or content coding), or None (then httpx reads the body)."""
    headers = response.headers
    if (
        response.url.scheme != "http"
        or response.http_version != "HTTP/1.1"
        or headers.get("content-encoding", "identity").lower() != "identity"
        or "transfer-encoding" in headers
    ):
        return None
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket):
        return None
    return sock


def _receive_into(
    sock: socket.socket, body: memoryview, filled: int, timeout: float | None, bar: ProgressBar | None
) -> int:
    """Fill ``body[filled:]`` from ``sock``; the number of bytes then in ``body`` (short: the peer closed)."""
    sock.settimeout(timeout)
    size = len(body)
    while filled < size:
        try:
            got = sock.recv_into(body[filled:], min(_SOCKET_PIECE, size - filled))
        except TimeoutError:
            raise httpx.ReadTimeout(f"no body bytes for {timeout} s") from None
        except OSError as exc:
            raise httpx.ReadError(f"reading the body failed: {exc}") from None
        if not got:
            break
        filled += got
        if bar is not None:
            bar.update(got)
    return filled


def binary_headers(body: bytes, accept: str | None = None) -> dict[str, str]:
    """Content-Length given, so the pieces go as one plain body (not chunked transfer encoding)."""
    headers = {"content-type": OCTET, "content-length": str(len(body))}
    if accept is not None:
        headers["accept"] = accept
    return headers


class ClientError(Exception):
    """The service answered with an error; ``problem`` holds its problem+json body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        super().__init__(f"{status} {problem.get('code', '')}: {problem.get('detail', problem)}")


@dataclass(frozen=True)
class Forest:
    edge_ids: np.ndarray[Any, np.dtype[np.int64]]
    weights: np.ndarray[Any, Any]
    total_weight: int | float
    num_components: int
    compute_ms: float


def npz_bytes(src: Any, dst: Any, weight: Any, num_vertices: int | None = None) -> bytes:
    """An npz upload body (arrays src, dst, weight and optionally num_vertices), uncompressed."""
    buf = io.BytesIO()
    arrays: dict[str, Any] = {"src": np.asarray(src), "dst": np.asarray(dst), "weight": np.asarray(weight)}
    if num_vertices is not None:
        arrays["num_vertices"] = np.int64(num_vertices)
    np.savez(buf, **arrays)
    return buf.getvalue()


def _forest_from_npz(response: httpx.Response, body: bytes | memoryview | None = None) -> Forest:
    with np.load(io.BytesIO(response.content if body is None else body), allow_pickle=False) as npz:
        edge_ids, weights = npz["edge_ids"], npz["weights"]
    headers = response.headers
    return Forest(
        edge_ids=edge_ids,
        weights=weights,
        total_weight=json.loads(headers["x-mst-total-weight"]),
        num_components=int(headers["x-mst-num-components"]),
        compute_ms=float(headers["x-mst-compute-ms"]),
    )


class Client:
    """Talks to one service; use as a context manager (or call :meth:`close`)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout: float = 600.0,
        api_key: str | None = None,
        progress: bool = False,
    ) -> None:
        headers = {} if api_key is None else {"authorization": f"Bearer {api_key}"}
        self._http = httpx.Client(base_url=base_url, timeout=timeout, headers=headers)
        #: progress bars on stderr for uploads and downloads of a few MB or more
        self.progress = progress
        #: how the graphs this client uploaded from SciPy or NetworkX objects became edge arrays
        self._sources: dict[str, GraphSource] = {}

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"detail": response.text}
            raise ClientError(response.status_code, problem)
        return response

    # graphs
    def upload_arrays(
        self, src: Any, dst: Any, weight: Any, num_vertices: int | None = None
    ) -> dict[str, Any]:
        """Upload edge arrays as an npz body (binary: weights keep their dtype exactly)."""
        return self.upload_bytes(npz_bytes(src, dst, weight, num_vertices), "npz")

    def _pieces(self, body: bytes) -> Iterator[bytes]:
        bar = ProgressBar("upload", len(body)) if self.progress and len(body) >= MIN_BYTES else None
        return body_pieces(body, bar)

    def upload_bytes(self, body: bytes, fmt: str = "npz") -> dict[str, Any]:
        response = self._http.post(
            "/v1/graphs", content=self._pieces(body), params={"format": fmt}, headers=binary_headers(body)
        )
        result: dict[str, Any] = self._check(response).json()
        return result

    def upload_graph(self, graph: Any, *, weight: str = "weight") -> dict[str, Any]:
        """Upload a SciPy sparse matrix (each stored entry an edge) or a NetworkX ``Graph``/``MultiGraph``.

        The client remembers how it turned the graph into edges, so :meth:`result` can give the
        forest back as a NetworkX graph or a SciPy matrix (see :mod:`service.client.interop`).
        """
        source = graph_source(graph, weight)
        record = self.upload_arrays(source.src, source.dst, source.weight, source.num_vertices)
        self._sources[record["id"]] = source
        return record

    def upload_file(self, path: str | Path, fmt: str | None = None) -> dict[str, Any]:
        path = Path(path)
        return self.upload_bytes(path.read_bytes(), fmt or _format_of(path))

    def upload_json(self, src: list[int], dst: list[int], weight: list[Any], **extra: Any) -> dict[str, Any]:
        body = {"src": src, "dst": dst, "weight": weight, **extra}
        result: dict[str, Any] = self._check(self._http.post("/v1/graphs", json=body)).json()
        return result

    def graphs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._check(self._http.get("/v1/graphs")).json()["graphs"]
        return result

    def graph(self, graph_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self._http.get(f"/v1/graphs/{graph_id}")).json()
        return result

    def delete_graph(self, graph_id: str) -> None:
        self._check(self._http.delete(f"/v1/graphs/{graph_id}"))

    def set_weights(self, graph_id: str, weights: Any) -> dict[str, Any]:
        """Replace every weight of a graph (an array in edge-id order, any supported dtype)."""
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(weights), allow_pickle=False)
        body = buffer.getvalue()
        response = self._http.put(
            f"/v1/graphs/{graph_id}/weights", content=body_pieces(body), headers=binary_headers(body)
        )
        result: dict[str, Any] = self._check(response).json()
        return result

    def update_weights(self, graph_id: str, edge_ids: Any, weights: Any) -> dict[str, Any]:
        """Change the weights of some edges (exact in the graph's weight dtype)."""
        buffer = io.BytesIO()
        np.savez(buffer, edge_ids=np.asarray(edge_ids, dtype=np.int64), weights=np.asarray(weights))
        body = buffer.getvalue()
        response = self._http.patch(
            f"/v1/graphs/{graph_id}/weights",
            content=body_pieces(body),
            params={"format": "npz"},
            headers=binary_headers(body),
        )
        result: dict[str, Any] = self._check(response).json()
        return result

    # jobs
    def submit(
        self, graph_id: str, wait: float = 0.0, *, objective: str = "min", cache: bool = False
    ) -> dict[str, Any]:
        """A spanning-forest job (``objective="max"``: the maximum one); ``cache``: see the README."""
        params: dict[str, Any] = {}
        if wait:
            params["wait"] = wait
        if objective != "min":
            params["objective"] = objective
        if cache:
            params["cache"] = "true"
        result: dict[str, Any] = self._check(
            self._http.post(f"/v1/graphs/{graph_id}/mst", params=params or None)
        ).json()
        return result

    def submit_task(
        self,
        graph_id: str,
        task: str,
        params: dict[str, Any] | None = None,
        *,
        wait: float = 0.0,
        cache: bool = False,
    ) -> dict[str, Any]:
        """A job of any task: ``mst`` (objective, exclude), ``components``, ``clusters``, ``dendrogram``."""
        query: dict[str, Any] = {"wait": wait} if wait else {}
        if cache:
            query["cache"] = "true"
        response = self._http.post(
            f"/v1/graphs/{graph_id}/jobs", json={"task": task, "params": params or {}}, params=query or None
        )
        result: dict[str, Any] = self._check(response).json()
        return result

    def job(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self._http.get(f"/v1/jobs/{job_id}")).json()
        return result

    def wait(self, job_id: str, timeout: float = 600.0, poll: float = 0.05) -> dict[str, Any]:
        """Poll a job until it is finished (or ``timeout`` passes: TimeoutError)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job['status']} after {timeout} s")
            time.sleep(poll)

    def cancel(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self._http.delete(f"/v1/jobs/{job_id}")).json()
        return result

    def result(self, job_id: str, *, output: str = "forest", source: Any = None) -> Any:
        """The forest of a succeeded job, fetched as npz.

        ``output``: ``"forest"`` (a :class:`Forest` of arrays), ``"networkx"`` (a graph) or
        ``"scipy"`` (an N x N ``csr_array``). The last two need the graph's edges: those of a
        graph this client uploaded with :meth:`upload_graph`, or ``source=`` (the same SciPy
        matrix or NetworkX graph that was uploaded).
        """
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(OUTPUTS)}; got {output!r}.")
        response, body = read_response(
            self._http, "GET", f"/v1/jobs/{job_id}/result", headers={"accept": OCTET}, progress=self.progress
        )
        forest = _forest_from_npz(self._check(response), body)
        if output == "forest":
            return forest
        if source is not None:
            edges = graph_source(source) if not isinstance(source, GraphSource) else source
        else:
            graph_id = self.job(job_id)["graph_id"]
            if graph_id not in self._sources:
                raise ValueError(
                    f"graph {graph_id} was not uploaded by this client with upload_graph(); pass "
                    "source= (the SciPy matrix or NetworkX graph) to convert its forest."
                )
            edges = self._sources[graph_id]
        return _convert(forest, edges, output)

    # point sets
    def upload_points(self, points: Any) -> dict[str, Any]:
        """Upload an ``(n, d)`` array of float32 or float64 coordinates (an npz body)."""
        buffer = io.BytesIO()
        np.savez(buffer, points=np.asarray(points))
        body = buffer.getvalue()
        response = self._http.post(
            "/v1/points", content=body_pieces(body), params={"format": "npz"}, headers=binary_headers(body)
        )
        result: dict[str, Any] = self._check(response).json()
        return result

    def point_sets(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._check(self._http.get("/v1/points")).json()["point_sets"]
        return result

    def delete_points(self, points_id: str) -> None:
        self._check(self._http.delete(f"/v1/points/{points_id}"))

    def submit_points(
        self, points_id: str, task: str, params: dict[str, Any] | None = None, *, wait: float = 0.0
    ) -> dict[str, Any]:
        """A job on a point set: ``emst``, ``hdbscan`` or ``single_linkage``."""
        response = self._http.post(
            f"/v1/points/{points_id}/jobs",
            json={"task": task, "params": params or {}},
            params={"wait": wait} if wait else None,
        )
        result: dict[str, Any] = self._check(response).json()
        return result

    def _points_result(self, points_id: str, task: str, params: dict[str, Any], wait: float) -> Any:
        job = self.submit_points(points_id, task, params, wait=wait)
        if job["status"] not in ("succeeded", "failed", "cancelled"):
            job = self.wait(job["id"], timeout=wait or 600.0)
        if job["status"] != "succeeded":
            raise ClientError(409, {"code": "job_" + job["status"], "detail": str(job.get("error"))})
        return self.result_arrays(job["id"])

    def emst(self, points_id: str, *, min_samples: int = 1, wait: float = 600.0) -> dict[str, Any]:
        """The tree (arrays ``src``, ``dst``, ``weights``; ``core_distances`` with min_samples > 1)."""
        result: dict[str, Any] = self._points_result(points_id, "emst", {"min_samples": min_samples}, wait)
        return result

    def hdbscan(self, points_id: str, *, wait: float = 600.0, **params: Any) -> dict[str, Any]:
        """Arrays ``labels`` (-1: noise) and ``probabilities``; ``params`` as scikit-learn's HDBSCAN
        takes them (``min_cluster_size``, ``min_samples``, ``cluster_selection_method``,
        ``cluster_selection_epsilon``)."""
        result: dict[str, Any] = self._points_result(points_id, "hdbscan", params, wait)
        return result

    def single_linkage(self, points_id: str, *, wait: float = 600.0) -> np.ndarray[Any, Any]:
        """The single-linkage dendrogram as a SciPy linkage matrix."""
        linkage: np.ndarray[Any, Any] = self._points_result(points_id, "single_linkage", {}, wait)["linkage"]
        return linkage

    def result_arrays(self, job_id: str) -> dict[str, np.ndarray[Any, Any]]:
        """The arrays of any succeeded job's result (``edge_ids``/``weights``, ``labels``, ``linkage``)."""
        response, body = read_response(
            self._http, "GET", f"/v1/jobs/{job_id}/result", headers={"accept": OCTET}
        )
        self._check(response)
        with np.load(io.BytesIO(body), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}

    def result_json(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self._http.get(f"/v1/jobs/{job_id}/result")).json()
        return result

    def one_shot(self, body: bytes, fmt: str = "npz") -> Forest:
        response, forest = read_response(
            self._http,
            "POST",
            "/v1/mst",
            content=self._pieces(body),
            params={"format": fmt},
            headers=binary_headers(body, OCTET),
            progress=self.progress,
        )
        return _forest_from_npz(self._check(response), forest)

    def one_shot_graph(self, graph: Any, *, weight: str = "weight", output: str = "forest") -> Any:
        """The forest of a SciPy sparse matrix or NetworkX graph in one request (nothing stored)."""
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(OUTPUTS)}; got {output!r}.")
        source = graph_source(graph, weight)
        forest = self.one_shot(npz_bytes(source.src, source.dst, source.weight, source.num_vertices))
        return forest if output == "forest" else _convert(forest, source, output)

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False


def _convert(forest: Forest, source: GraphSource, output: str) -> Any:
    if output == "scipy":
        return source.to_scipy(forest.edge_ids, forest.weights)
    return source.to_networkx(forest.edge_ids, forest.weights)


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower().lstrip(".")
    aliases = {"txt": "edgelist", "el": "edgelist", "gr": "dimacs", "arrows": "arrow", "pq": "parquet"}
    return aliases.get(suffix, suffix or "npz")


def _point_command(mst: Client, args: argparse.Namespace) -> dict[str, Any]:
    """Run a point-set verb of the CLI; the arrays go to ``--out`` (npz), their shapes to stdout."""
    arrays: dict[str, Any]
    if args.command == "emst":
        arrays = mst.emst(args.points_id, min_samples=args.min_samples)
    elif args.command == "hdbscan":
        params: dict[str, Any] = {"min_cluster_size": args.min_cluster_size}
        params.update(cluster_selection_method=args.method, cluster_selection_epsilon=args.epsilon)
        if args.min_samples is not None:
            params["min_samples"] = args.min_samples
        arrays = mst.hdbscan(args.points_id, **params)
    else:
        arrays = {"linkage": mst.single_linkage(args.points_id)}
    out: dict[str, Any] = {name: list(a.shape) for name, a in arrays.items()}
    if "labels" in arrays:
        out["num_clusters"] = int(arrays["labels"].max()) + 1 if arrays["labels"].size else 0
    if args.out is not None:
        np.savez(args.out, **arrays)
        out["written"] = str(args.out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.client", description="Talk to an MST service.")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("MST_API_KEY") or None,
        help="the service's API key (default: $MST_API_KEY; prefer the variable, a flag shows in ps)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars on stderr for transfers of a few MB or more (default: when stderr is a terminal)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("upload", help="upload a graph file")
    p.add_argument("file", type=Path)
    p.add_argument("--format", default=None)
    sub.add_parser("list", help="list graphs")
    p = sub.add_parser("mst", help="submit a job for a graph")
    p.add_argument("graph_id")
    p.add_argument("--wait", type=float, default=60.0)
    p = sub.add_parser("job", help="show a job")
    p.add_argument("job_id")
    p = sub.add_parser("result", help="fetch a result")
    p.add_argument("job_id")
    p.add_argument("--out", type=Path, default=None, help="write the npz here instead of printing JSON")
    p = sub.add_parser("delete", help="delete a graph")
    p.add_argument("graph_id")
    p = sub.add_parser("oneshot", help="compute the forest of a file without storing it")
    p.add_argument("file", type=Path)
    p.add_argument("--format", default=None)
    p = sub.add_parser(
        "upload-points", help="upload a point set (.npy of shape (n, d), or .npz with 'points')"
    )
    p.add_argument("file", type=Path)
    for verb, about in (
        ("emst", "the Euclidean (mutual-reachability) minimum spanning tree of a point set"),
        ("hdbscan", "HDBSCAN* labels and probabilities of a point set"),
        ("single-linkage", "the single-linkage dendrogram of a point set"),
    ):
        p = sub.add_parser(verb, help=about)
        p.add_argument("points_id")
        p.add_argument("--out", type=Path, default=None, help="write the arrays to this .npz")
        if verb == "emst":
            p.add_argument("--min-samples", type=int, default=1)
        if verb == "hdbscan":
            p.add_argument("--min-cluster-size", type=int, default=5)
            p.add_argument("--min-samples", type=int, default=None)
            p.add_argument("--method", choices=("eom", "leaf"), default="eom")
            p.add_argument("--epsilon", type=float, default=0.0)
    args = parser.parse_args(argv)
    out: Any
    try:
        with Client(args.url, api_key=args.api_key, progress=progress_wanted(args.progress)) as mst:
            if args.command == "upload":
                out = mst.upload_file(args.file, args.format)
            elif args.command == "list":
                out = mst.graphs()
            elif args.command == "mst":
                out = mst.submit(args.graph_id, wait=args.wait)
            elif args.command == "job":
                out = mst.job(args.job_id)
            elif args.command == "result" and args.out is not None:
                forest = mst.result(args.job_id)
                np.savez(args.out, edge_ids=forest.edge_ids, weights=forest.weights)
                out = {"written": str(args.out), "num_edges": int(forest.edge_ids.size)}
            elif args.command == "result":
                out = mst.result_json(args.job_id)
            elif args.command == "delete":
                mst.delete_graph(args.graph_id)
                out = {"deleted": args.graph_id}
            elif args.command == "upload-points":
                data = np.load(args.file, allow_pickle=False)
                out = mst.upload_points(data["points"] if args.file.suffix == ".npz" else data)
            elif args.command in ("emst", "hdbscan", "single-linkage"):
                out = _point_command(mst, args)
            else:
                forest = mst.one_shot(args.file.read_bytes(), args.format or _format_of(args.file))
                out = {
                    "num_edges": int(forest.edge_ids.size),
                    "total_weight": forest.total_weight,
                    "num_components": forest.num_components,
                    "compute_ms": forest.compute_ms,
                }
    except ClientError as exc:
        print(json.dumps(exc.problem, indent=2), file=sys.stderr)
        return 1
    except httpx.TransportError as exc:
        print(f"cannot reach {args.url}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0
