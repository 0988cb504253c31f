"""The datasets' tables: graphs and point sets, where each lives (placements), and point-set models.

A dataset's record is committed in one transaction with its placement and the check of its
owner's quotas (:meth:`GraphTable.commit_graph`), so concurrent uploads through different
processes never pass a quota together. A placement names the dataset's worker; that worker alone
writes what it holds of it (:meth:`GraphTable.set_residency`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields

from .database import Database
from .records import GraphRecord, ModelRecord, Placement
from .reserve import Reserve

_GRAPH_COLUMNS = [f.name for f in fields(GraphRecord)]
_MODEL_COLUMNS = [f.name for f in fields(ModelRecord)]
_INSERT_GRAPH = (
    f"INSERT INTO graphs ({', '.join(_GRAPH_COLUMNS)}) VALUES ({', '.join('?' * len(_GRAPH_COLUMNS))})"
)
_USAGE = (
    "SELECT COUNT(*), COALESCE(SUM(device_bytes), 0) "
    "+ (SELECT COALESCE(SUM(model_bytes), 0) FROM models WHERE owner = ?) "
    "FROM graphs WHERE owner = ?"
)

#: checks an owner's (graphs stored, device bytes held) before a new dataset is committed; raises to refuse
QuotaCheck = Callable[[int, int], None]


class GraphTable:
    """Datasets, placements and models (a part of :class:`~service.storage.store.Store`)."""

    db: Database
    reserve: Reserve

    # -- graphs and point sets ----------------------------------------------------------------

    def add_graph(self, graph: GraphRecord) -> None:
        self.db.write(_INSERT_GRAPH, [getattr(graph, c) for c in _GRAPH_COLUMNS])

    def commit_graph(
        self, graph: GraphRecord, placements: Iterable[tuple[str, int, int]], check: QuotaCheck | None = None
    ) -> None:
        """Record a new dataset and its placements ``(key, worker, device bytes)``, resident, in one
        transaction; ``check`` sees its owner's usage first (without it) and may refuse."""
        with self.db.tx() as db:
            if check is not None:
                count, used = db.execute(_USAGE, (graph.owner, graph.owner)).fetchone()
                check(int(count), int(used))
            db.execute(_INSERT_GRAPH, [getattr(graph, c) for c in _GRAPH_COLUMNS])
            db.executemany(
                "INSERT OR REPLACE INTO placements (key, graph_id, worker, status, device_bytes) "
                "VALUES (?, ?, ?, 'resident', ?)",
                [(key, graph.id, worker, nbytes) for key, worker, nbytes in placements],
            )

    def get_graph(self, graph_id: str, owner: str | None = None) -> GraphRecord | None:
        """The graph's record; None when there is none, or it is not ``owner``'s (None: anyone's)."""
        row = self.db.read_one("SELECT * FROM graphs WHERE id = ?", (graph_id,))
        if row is None or (owner is not None and row["owner"] != owner):
            return None
        return GraphRecord(**dict(row))

    def list_graphs(self, owner: str | None = None, kind: str | None = None) -> list[GraphRecord]:
        """The datasets of ``owner`` (None: of everyone) of ``kind`` (None: graphs and point sets),
        oldest first."""
        where = [(c, v) for c, v in (("owner", owner), ("kind", kind)) if v is not None]
        clause = (" WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)) if where else ""
        rows = self.db.read(f"SELECT * FROM graphs{clause} ORDER BY created_at, id", [v for _, v in where])
        return [GraphRecord(**dict(r)) for r in rows]

    def set_graph_weights(
        self, graph_id: str, version: int, weight_dtype: str | None = None, device_bytes: int | None = None
    ) -> GraphRecord | None:
        """Record a graph's weights version (and new dtype and size; their file is already in place)."""
        rows = self.db.write(
            "UPDATE graphs SET weights_version = MAX(weights_version, ?), "
            "weight_dtype = COALESCE(?, weight_dtype), device_bytes = COALESCE(?, device_bytes) "
            "WHERE id = ? RETURNING *",
            (version, weight_dtype, device_bytes, graph_id),
        )
        return GraphRecord(**dict(rows[0])) if rows else None

    def graph_usage(self, owner: str) -> tuple[int, int]:
        """How many graphs ``owner`` stores and the device bytes they (and their models) hold together."""
        row = self.db.read_one(_USAGE, (owner, owner))
        assert row is not None
        return int(row[0]), int(row[1])

    def delete_graph_record(self, graph_id: str) -> bool:
        """Delete a dataset's record, placements and models (its files are the caller's); True when
        there was one. On a full disk the reserve makes room for it."""

        def delete() -> bool:
            with self.db.tx() as db:
                gone = db.execute("DELETE FROM graphs WHERE id = ?", (graph_id,)).rowcount > 0
                db.execute("DELETE FROM models WHERE points_id = ?", (graph_id,))
                db.execute("DELETE FROM placements WHERE graph_id = ?", (graph_id,))
            return gone

        return self.reserve.freeing(delete)

    # -- placements ---------------------------------------------------------------------------

    def placements_of(self, graph_id: str) -> list[Placement]:
        """Where a dataset lives: one placement, or one per shard in shard order."""
        rows = self.db.read(
            "SELECT * FROM placements WHERE graph_id = ? ORDER BY length(key), key", (graph_id,)
        )
        return [Placement(**dict(r)) for r in rows]

    def placement(self, key: str) -> Placement | None:
        row = self.db.read_one("SELECT * FROM placements WHERE key = ?", (key,))
        return None if row is None else Placement(**dict(row))

    def placed_on(self, worker: int) -> list[Placement]:
        """The datasets placed on ``worker``, smallest first (its reloads' order)."""
        rows = self.db.read("SELECT * FROM placements WHERE worker = ? ORDER BY device_bytes, key", (worker,))
        return [Placement(**dict(r)) for r in rows]

    def held_bytes(self) -> dict[int, int]:
        """Bytes of the datasets placed on each worker (by the last size its worker reported)."""
        rows = self.db.read("SELECT worker, COALESCE(SUM(device_bytes), 0) FROM placements GROUP BY worker")
        return {int(r[0]): int(r[1]) for r in rows}

    def set_residency(
        self, key: str, status: str, device_bytes: int | None = None, error: str | None = None
    ) -> None:
        """A worker's word on a dataset it holds (its size is kept when not given)."""
        self.db.write(
            "UPDATE placements SET status = ?, device_bytes = COALESCE(?, device_bytes), error = ? "
            "WHERE key = ?",
            (status, device_bytes, error, key),
        )

    def replace_placements(self, assignments: Iterable[Placement]) -> None:
        """Place every stored dataset afresh (the supervisor, at start-up), each ``loading``."""
        with self.db.tx() as db:
            db.execute("DELETE FROM placements")
            db.executemany(
                "INSERT INTO placements (key, graph_id, worker, status, device_bytes) "
                "VALUES (?, ?, ?, 'loading', ?)",
                [(p.key, p.graph_id, p.worker, p.device_bytes) for p in assignments],
            )

    # -- models of point sets -----------------------------------------------------------------

    def add_model(self, model: ModelRecord, check: QuotaCheck | None = None) -> bool:
        """Record a model while its point set exists (False otherwise); ``check`` as for a dataset."""
        marks = ", ".join("?" * len(_MODEL_COLUMNS))
        with self.db.tx() as db:
            if db.execute("SELECT 1 FROM graphs WHERE id = ?", (model.points_id,)).fetchone() is None:
                return False
            if check is not None:
                count, used = db.execute(_USAGE, (model.owner, model.owner)).fetchone()
                check(int(count), int(used))
            db.execute(
                f"INSERT INTO models ({', '.join(_MODEL_COLUMNS)}) VALUES ({marks})",
                [getattr(model, c) for c in _MODEL_COLUMNS],
            )
        return True

    def get_model(self, model_id: str) -> ModelRecord | None:
        row = self.db.read_one("SELECT * FROM models WHERE id = ?", (model_id,))
        return None if row is None else ModelRecord(**dict(row))

    def list_models(self, points_id: str) -> list[ModelRecord]:
        """The models of a point set, oldest first."""
        rows = self.db.read("SELECT * FROM models WHERE points_id = ? ORDER BY created_at, id", (points_id,))
        return [ModelRecord(**dict(r)) for r in rows]

    def set_model_bytes(self, model_id: str, model_bytes: int) -> None:
        self.db.write("UPDATE models SET model_bytes = ? WHERE id = ?", (model_bytes, model_id))

    def delete_model(self, model_id: str) -> bool:
        def delete() -> bool:
            return self.db.write_count("DELETE FROM models WHERE id = ?", (model_id,)) > 0

        return self.reserve.freeing(delete)
