"""The CLI: ``python -m service.client`` (see :mod:`service.client` for its verbs)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from .client import Client, ClientError, format_of
from .progress import wanted as progress_wanted


def _point_command(mst: Client, args: argparse.Namespace) -> dict[str, Any]:
    """Run a point-set verb of the CLI; the arrays go to ``--out`` (npz), their shapes to stdout."""
    arrays: dict[str, Any]
    metric: dict[str, Any] = {"metric": args.metric}
    if args.p is not None:
        metric["metric_params"] = {"p": args.p}
    if args.command == "emst":
        arrays = mst.emst(args.points_id, min_samples=args.min_samples, **metric)
    elif args.command == "hdbscan":
        params: dict[str, Any] = {"min_cluster_size": args.min_cluster_size, **metric}
        params.update(cluster_selection_method=args.method, cluster_selection_epsilon=args.epsilon)
        if args.min_samples is not None:
            params["min_samples"] = args.min_samples
        arrays = mst.hdbscan(args.points_id, **params)
    else:
        arrays = {"linkage": mst.single_linkage(args.points_id, **metric)}
    out: dict[str, Any] = {name: list(a.shape) for name, a in arrays.items()}
    if "labels" in arrays:
        out["num_clusters"] = int(arrays["labels"].max()) + 1 if arrays["labels"].size else 0
    if args.out is not None:
        np.savez(args.out, **arrays)
        out["written"] = str(args.out)
    return out


def _parser() -> argparse.ArgumentParser:
    """The CLI's arguments: the service to talk to, then one verb and its own."""
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
    _add_point_verbs(sub)
    return parser


def _add_point_verbs(sub: Any) -> None:
    """The point-set verbs: ``upload-points``, and ``emst``, ``hdbscan``, ``single-linkage`` on one."""
    p = sub.add_parser(
        "upload-points", help="upload a point set (.npy of shape (n, d), or .npz with 'points')"
    )
    p.add_argument("file", type=Path)
    for verb, about in (
        ("emst", "the (mutual-reachability) minimum spanning tree of a point set under a metric"),
        ("hdbscan", "HDBSCAN* labels and probabilities of a point set"),
        ("single-linkage", "the single-linkage dendrogram of a point set"),
    ):
        p = sub.add_parser(verb, help=about)
        p.add_argument("points_id")
        p.add_argument("--out", type=Path, default=None, help="write the arrays to this .npz")
        metrics = (
            "euclidean, manhattan, chebyshev, minkowski (with --p), cosine, haversine (lat, lon radians)"
        )
        p.add_argument("--metric", default="euclidean", help=metrics)
        p.add_argument("--p", type=float, default=None, help="minkowski's p (>= 1)")
        if verb == "emst":
            p.add_argument("--min-samples", type=int, default=1)
        if verb == "hdbscan":
            p.add_argument("--min-cluster-size", type=int, default=5)
            p.add_argument("--min-samples", type=int, default=None)
            p.add_argument("--method", choices=("eom", "leaf"), default="eom")
            p.add_argument("--epsilon", type=float, default=0.0)


def _command(mst: Client, args: argparse.Namespace) -> Any:
    """Run the verb ``args`` names; what it prints (as JSON)."""
    if args.command == "upload":
        return mst.upload_file(args.file, args.format)
    if args.command == "list":
        return mst.graphs()
    if args.command == "mst":
        return mst.submit(args.graph_id, wait=args.wait)
    if args.command == "job":
        return mst.job(args.job_id)
    if args.command == "result" and args.out is not None:
        forest = mst.result(args.job_id)
        np.savez(args.out, edge_ids=forest.edge_ids, weights=forest.weights)
        return {"written": str(args.out), "num_edges": int(forest.edge_ids.size)}
    if args.command == "result":
        return mst.result_json(args.job_id)
    if args.command == "delete":
        mst.delete_graph(args.graph_id)
        return {"deleted": args.graph_id}
    if args.command == "upload-points":
        data = np.load(args.file, allow_pickle=False)
        return mst.upload_points(data["points"] if args.file.suffix == ".npz" else data)
    if args.command in ("emst", "hdbscan", "single-linkage"):
        return _point_command(mst, args)
    forest = mst.one_shot(args.file.read_bytes(), args.format or format_of(args.file))
    return {
        "num_edges": int(forest.edge_ids.size),
        "total_weight": forest.total_weight,
        "num_components": forest.num_components,
        "compute_ms": forest.compute_ms,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with Client(args.url, api_key=args.api_key, progress=progress_wanted(args.progress)) as mst:
            out = _command(mst, args)
    except ClientError as exc:
        print(json.dumps(exc.problem, indent=2), file=sys.stderr)
        return 1
    except httpx.TransportError as exc:
        print(f"cannot reach {args.url}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0
