"""The library: a small synchronous Python client of the service (httpx), one method per route.

>>> with Client("http://127.0.0.1:8000", api_key=key) as mst: # doctest: +SKIP
...     graph = mst.upload_arrays(src, dst, weight)
...     forest = mst.forest(graph["id"], wait=30)            # one request: the job and its npz
...     forest.total_weight, forest.edge_ids[:5]
...     job = mst.submit(graph["id"], wait=30)                 # or the job, then its result
...     forest = mst.result(job["id"])
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from gpu_core._stored_npz import stored_npz

from . import progress as bars
from .direct import DirectConnection
from .interop import GraphSource, graph_source
from .progress import ProgressBar
from .transfer import OCTET, binary_headers, body_pieces, read_response

#: what :meth:`Client.result` and :meth:`Client.one_shot_graph` can return
OUTPUTS = ("forest", "networkx", "scipy")


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


def _npz_arrays(data: bytes | memoryview) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays of an ``.npz`` body: the service's stored archives read where they lie
    (:func:`gpu_core._stored_npz.stored_npz`, without ``numpy.load``'s zipfile walk and copies),
    anything else by ``numpy.load`` (never unpickled)."""
    arrays = stored_npz(data)
    if arrays is not None:
        return arrays
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def _forest_from_npz(response: httpx.Response, body: bytes | memoryview | None = None) -> Forest:
    arrays = _npz_arrays(response.content if body is None else body)
    edge_ids, weights = arrays["edge_ids"], arrays["weights"]
    headers = response.headers
    return Forest(
        edge_ids=edge_ids,
        weights=weights,
        total_weight=json.loads(headers["x-mst-total-weight"]),
        num_components=int(headers["x-mst-num-components"]),
        compute_ms=float(headers["x-mst-compute-ms"]),
    )


def _mst_query(wait: float, objective: str, cache: bool) -> dict[str, Any]:
    """The query of a spanning-forest submission: only what differs from the route's defaults."""
    params: dict[str, Any] = {}
    if wait:
        params["wait"] = wait
    if objective != "min":
        params["objective"] = objective
    if cache:
        params["cache"] = "true"
    return params


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
        #: a job's and a result's binary answers come over this connection (plain HTTP, no proxy)
        self._direct = DirectConnection(self._http)
        #: progress bars on stderr for uploads and downloads of a few MB or more
        self.progress = progress
        #: how the graphs this client uploaded from SciPy or NetworkX objects became edge arrays
        self._sources: dict[str, GraphSource] = {}

    def close(self) -> None:
        self._direct.close()
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, method: str, url: str, **kwargs: Any) -> tuple[httpx.Response, bytes | memoryview]:
        """A request's response and its body read into one buffer: over :attr:`_direct` when it
        serves the request (no body to send), else :func:`~.transfer.read_response` (httpx)."""
        if self._direct.serves(kwargs):
            return self._direct.request(method, url, progress=self.progress, **kwargs)
        return read_response(self._http, method, url, progress=self.progress, **kwargs)

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
        bar = ProgressBar("upload", len(body)) if self.progress and len(body) >= bars.MIN_BYTES else None
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
        return self.upload_bytes(path.read_bytes(), fmt or format_of(path))

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
        params = _mst_query(wait, objective, cache)
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
        response, body = self._read("GET", f"/v1/jobs/{job_id}/result", headers={"accept": OCTET})
        forest = _forest_from_npz(self._check(response), body)
        if output == "forest":
            return forest
        return self._converted(forest, output, source, lambda: str(self.job(job_id)["graph_id"]))

    def forest(
        self,
        graph_id: str,
        *,
        wait: float = 600.0,
        objective: str = "min",
        cache: bool = False,
        output: str = "forest",
        source: Any = None,
    ) -> Any:
        """A spanning forest of a resident graph in one round trip: the job submitted with ``?wait=``
        and ``Accept: application/octet-stream``, answered with its result once it succeeded (a job
        still running when the wait ends is waited for and its result fetched). ``output`` and
        ``source``: as :meth:`result`. A job that fails raises :class:`ClientError`."""
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(OUTPUTS)}; got {output!r}.")
        response, body = self._read(
            "POST", f"/v1/graphs/{graph_id}/mst", params=_mst_query(wait, objective, cache),
            headers={"accept": f"{OCTET}, application/json;q=0.5"},
        )  # fmt: skip
        self._check(response)
        if response.headers.get("content-type") == OCTET:
            forest: Forest = _forest_from_npz(response, body)
        else:  # the job: still running when the wait ended, or finished without a forest
            job = json.loads(bytes(body))
            if job["status"] in ("queued", "running"):
                job = self.wait(job["id"], timeout=max(wait, 600.0))
            forest = self.result(job["id"])  # a job that did not succeed: the result route's 409
        if output == "forest":
            return forest
        return self._converted(forest, output, source, lambda: graph_id)

    def _converted(self, forest: Forest, output: str, source: Any, graph_of: Callable[[], str]) -> Any:
        """``forest`` as a NetworkX graph or SciPy matrix, by ``source`` or the graph this client uploaded."""
        if source is not None:
            edges = graph_source(source) if not isinstance(source, GraphSource) else source
        else:
            graph_id = graph_of()
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

    def emst(
        self, points_id: str, *, min_samples: int = 1, wait: float = 600.0, **metric: Any
    ) -> dict[str, Any]:
        """The tree (arrays ``src``, ``dst``, ``weights``; ``core_distances`` with min_samples > 1);
        ``metric``: ``metric`` and ``metric_params`` as ``gpu_core.metric_mst`` takes them."""
        params = {"min_samples": min_samples, **metric}
        result: dict[str, Any] = self._points_result(points_id, "emst", params, wait)
        return result

    def hdbscan(self, points_id: str, *, wait: float = 600.0, **params: Any) -> dict[str, Any]:
        """Arrays ``labels`` (-1: noise) and ``probabilities``; ``params`` as scikit-learn's HDBSCAN
        takes them (``min_cluster_size``, ``min_samples``, ``cluster_selection_method``,
        ``cluster_selection_epsilon``, ``allow_single_cluster``, ``max_cluster_size``, ``metric``,
        ``metric_params``)."""
        result: dict[str, Any] = self._points_result(points_id, "hdbscan", params, wait)
        return result

    def single_linkage(self, points_id: str, *, wait: float = 600.0, **metric: Any) -> np.ndarray[Any, Any]:
        """The single-linkage dendrogram as a SciPy linkage matrix (``metric``: ``metric`` and
        ``metric_params``)."""
        result = self._points_result(points_id, "single_linkage", metric, wait)
        linkage: np.ndarray[Any, Any] = result["linkage"]
        return linkage

    def fit_model(self, points_id: str, **params: Any) -> dict[str, Any]:
        """Fit an HDBSCAN* model that stays resident with the point set (``params`` as
        ``gpu_core.HDBSCAN`` takes them: ``min_cluster_size``, ``min_samples``,
        ``cluster_selection_method``, ``cluster_selection_epsilon``, ``allow_single_cluster``,
        ``max_cluster_size``, ``metric``, ``metric_params``); its record, ``id`` among it."""
        response = self._http.post(f"/v1/points/{points_id}/models", json=params)
        result: dict[str, Any] = self._check(response).json()
        return result

    def models(self, points_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._check(self._http.get(f"/v1/points/{points_id}/models")).json()[
            "models"
        ]
        return result

    def delete_model(self, points_id: str, model_id: str) -> None:
        self._check(self._http.delete(f"/v1/points/{points_id}/models/{model_id}"))

    def predict(
        self, points_id: str, model_id: str, points: Any, *, membership: bool = False
    ) -> dict[str, np.ndarray[Any, Any]]:
        """Labels (-1: noise) and probabilities of new points (an ``(q, d)`` array) by the model, as
        the hdbscan library's ``approximate_predict``; with ``membership``, also ``membership``
        (``membership_vector``: a row per point, a value per cluster). Sent and answered as npz."""
        buffer = io.BytesIO()
        np.savez(buffer, points=np.asarray(points))
        body = buffer.getvalue()
        response = self._http.post(
            f"/v1/points/{points_id}/models/{model_id}/predict",
            content=body,
            params={"format": "npz", "membership": "true" if membership else "false"},
            headers=binary_headers(body, accept=OCTET),
        )
        return _npz_arrays(self._check(response).content)

    def result_arrays(self, job_id: str) -> dict[str, np.ndarray[Any, Any]]:
        """The arrays of any succeeded job's result (``edge_ids``/``weights``, ``labels``, ``linkage``)."""
        response, body = self._read("GET", f"/v1/jobs/{job_id}/result", headers={"accept": OCTET})
        self._check(response)
        return _npz_arrays(body)

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


def format_of(path: Path) -> str:
    """The upload format a file's suffix names (``.txt``: an edge list, ...; none: npz)."""
    suffix = path.suffix.lower().lstrip(".")
    aliases = {"txt": "edgelist", "el": "edgelist", "gr": "dimacs", "arrows": "arrow", "pq": "parquet"}
    return aliases.get(suffix, suffix or "npz")
