"""A NumPy model of ``kernels/brute.cu``'s ``fused_select`` and ``fused_flush``, for CPU tests of the
device engine's host side (batches, blocks and their skips, stops and relaunches, devices).

Each model takes the kernel's own argument tuple, in the kernel's order, and does what the kernel
does, step for step: the block's rows against each tile of 128 targets, float16 products summed in
float32, the filtered key ``v = fma(-2, s, tn2)`` rounded to float32, the row's thresholds rounded
up to float32, candidates appended to the row's buffer (their key less the row's squared norm), a
buffer over ``cap - 256`` compacted before the next tile's selection (under mutual reachability
each entry raised to the target's core first; its m-th key, ``filter.upper``, ``filter.threshold``)
or the row stopped with that tile to resume from, every buffer compacted once more at the end, and
the flush's exact recheck and merge. :class:`ModelEngine` is ``DeviceEngine`` on NumPy with
these models in place of the compiled kernels. What the model cannot check is the kernels' CUDA
(fragment layouts, races): the GPU tests and compute-sanitizer do.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from gpu_core._points import brute_gpu
from gpu_core._points.brute_gpu import BN, DeviceEngine
from gpu_core._points.filter import threshold, upper


def split_every_search(monkeypatch: Any) -> list[int]:
    """Windows of one tile (so small sets split) and a record of each split search's window count:
    the tests of the target windows read it to know the split ran."""
    monkeypatch.setattr(brute_gpu, "SPLIT_MIN_TILES", 1)
    windows: list[int] = []
    original = brute_gpu.DeviceEngine._split_search

    def counting(self: DeviceEngine, rows: Any, targets: Any, m: int, blocks: Any, splits: int) -> Any:
        windows.append(splits)
        return original(self, rows, targets, m, blocks, splits)

    monkeypatch.setattr(brute_gpu.DeviceEngine, "_split_search", counting)
    return windows


def _ru32(x: float) -> np.float32:
    """``__double2float_ru``."""
    f = np.float32(x)
    return f if float(f) >= x or np.isnan(f) else np.nextafter(f, np.float32(np.inf))


def _add_ru(a: float, b: float) -> float:
    """``__dadd_ru`` (the exact sum rounded up: nudged where nearest rounding went down)."""
    s = a + b
    bb = s - a
    lost = (a - (s - bb)) + (b - bb)  # TwoSum: the exact sum is s + lost
    return float(np.nextafter(s, np.inf)) if lost > 0 else s


def _sub_ru(a: float, b: float) -> float:
    return _add_ru(a, -b)


def _threshold(theta: float, alpha: float, beta: float) -> float:
    return float(threshold(np, np.float64(theta), alpha, beta)) if np.isfinite(theta) else np.inf


def _fma32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``fma(-2, a, b)`` in float32: exact in float64 (float32 inputs), one rounding."""
    return (b.astype(np.float64) - 2.0 * a.astype(np.float64)).astype(np.float32)


def fused_select(rows_per_block: int) -> Any:
    """The model of ``fused_select_{rows_per_block}`` (every build of it: where the rows' float16
    coordinates are read from changes no product)."""

    def run(grid: tuple[int], block: tuple[int], args: tuple[Any, ...], shared_mem: int = 0) -> None:
        del block, shared_mem
        for b in range(grid[0]):
            _select_block(rows_per_block, b, *args)

    return run


def _select_block(
    bm, b, qa, row_src, slots, slot_base, num_p, blk_lo, blk_hi, blk_skip_lo, blk_skip_hi, dpad, tb, n_t,
    tn2f, tcore_f, tcore_d, tcomp, qn2, qcore, qcomp, alpha, beta, theta, tq_out, count, start_tile, resume,
    stops, buf_key, buf_pos, cap, m, mode, dump,
) -> None:  # fmt: skip
    slot_base, num_p, dpad, n_t, cap, m, mode = (int(x) for x in (slot_base, num_p, dpad, n_t, cap, m, mode))
    p_lo = int(blk_lo[b]) if blk_lo is not None else b * bm
    p_hi = int(blk_hi[b]) if blk_hi is not None else min(num_p, p_lo + bm)
    rows = p_hi - p_lo
    skip_lo = int(blk_skip_lo[b]) if blk_skip_lo is not None else n_t
    skip_hi = int(blk_skip_hi[b]) if blk_skip_hi is not None else n_t
    tiles_lo = -(-skip_lo // BN)
    ntiles = tiles_lo + -(-(n_t - skip_hi) // BN)
    p = np.arange(p_lo, p_hi)
    slot = np.asarray(slots[p_lo:p_hi]) if slots is not None else slot_base + p
    src = np.asarray(row_src[slot]) if row_src is not None else slot
    a = qa[src].astype(np.float32)
    tq = np.empty(rows, dtype=np.float32)
    tk = np.empty(rows, dtype=np.float32)
    for r in range(rows):
        t = _threshold(float(theta[slot[r]]), float(alpha[src[r]]), float(beta[src[r]]))
        tk[r] = _ru32(t)
        tq[r] = _ru32(_sub_ru(t, float(qn2[src[r]])))
    cnt = np.asarray(count[p_lo:p_hi]).astype(np.int64)
    start = np.asarray(start_tile[slot]) if start_tile is not None else np.zeros(rows, dtype=np.int64)
    qc = np.asarray(qcomp[src]) if qcomp is not None else np.full(rows, -1)
    if mode == 0:
        resume[slot] = -1
    over = False
    for tile in range(int(start.min()), ntiles):
        if over:  # the last tile filled some buffer: compaction before this tile's selection
            over = False
            for r in range(rows):
                if cnt[r] > cap - 2 * BN and tq[r] != -np.inf:
                    _compact(r, int(p[r]), int(slot[r]), int(src[r]), tile, True, m, cap, buf_key, buf_pos,
                             qn2, qcore, tcore_d, alpha, beta, theta, tq_out, resume, stops, tq, tk,
                             cnt)  # fmt: skip
        col0 = tile * BN if tile < tiles_lo else skip_hi + (tile - tiles_lo) * BN
        limit = skip_lo if tile < tiles_lo else n_t
        cols = np.arange(col0, min(col0 + BN, limit))
        s = a @ tb[cols].astype(np.float32).T  # float16 products, float32 sums
        if mode == 1:
            continue
        if mode == 2:
            dump[p_lo:p_hi][:, cols] = s
            continue
        v = _fma32(s, tn2f[cols][None, :])
        live = (tile >= start)[:, None]
        passing = live & (v <= tq[:, None])
        if tcomp is not None:
            passing &= tcomp[cols][None, :] != qc[:, None]
        if tcore_f is not None:
            passing &= tcore_f[cols][None, :] <= tk[:, None]
        for r, c in zip(*np.nonzero(passing), strict=True):
            o = int(p[r]) * cap + int(cnt[r])  # the filtered key less the row's squared norm
            buf_key[o], buf_pos[o] = np.float32(v[r, c]), cols[c]
            cnt[r] += 1
            over |= bool(cnt[r] > cap - 2 * BN)
    if mode == 0:
        for r in range(rows):  # every buffer compacted once more: the flush rechecks fewer
            if cnt[r] > m and tq[r] != -np.inf:
                _compact(r, int(p[r]), int(slot[r]), int(src[r]), ntiles, False, m, cap, buf_key, buf_pos,
                         qn2, qcore, tcore_d, alpha, beta, theta, tq_out, resume, stops, tq, tk,
                         cnt)  # fmt: skip
        count[p_lo:p_hi] = cnt
        going = tq != -np.inf  # a stopped row's limit was written as it stopped
        tq_out[slot[going]] = tq[going]


#: the kernel's FS_SELECT_STEPS
SELECT_STEPS = 12


def _bound_mth(keys: np.ndarray, m: int) -> np.float32:
    """The kernel's bound on a buffer's m-th smallest entry: halvings, in float32, between the least
    and the greatest entry, each kept as the bound where at least m entries are at or below it."""
    lo, hi = np.float32(keys.min()), np.float32(keys.max())
    half = np.float32(0.5)
    for _ in range(SELECT_STEPS):
        mid = np.float32(half * lo + half * hi)
        if not mid < hi:
            break
        if int((keys <= mid).sum()) >= m:
            hi = mid
        else:
            lo = mid
    return hi


def _compact(
    r, p, slot, row, tile, may_stop, m, cap, buf_key, buf_pos, qn2, qcore, tcore_d, alpha, beta, theta,
    tq_out, resume, stops, tq, tk, cnt,
):  # fmt: skip
    c = int(cnt[r])
    base = p * cap
    if tcore_d is not None:  # under mutual reachability: at least the target's core less qn2, rounded up
        for e in range(base, base + c):
            cores = _ru32(_sub_ru(float(tcore_d[buf_pos[e]]), float(qn2[row])))
            buf_key[e] = max(buf_key[e], cores)
    keys = buf_key[base : base + c].copy()
    pos = buf_pos[base : base + c].copy()
    f = _add_ru(float(_bound_mth(keys, m)), float(qn2[row]))  # a bound on the m-th key, rounded up
    if qcore is not None:
        f = max(f, float(qcore[row]))
    a, b = float(alpha[row]), float(beta[row])
    th = min(float(theta[slot]), float(upper(np, np.float64(f), a, b)))
    t = _threshold(th, a, b)
    tk[r] = _ru32(t)
    tq[r] = _ru32(_sub_ru(t, float(qn2[row])))
    keep = keys <= tq[r]
    w = int(keep.sum())
    buf_key[base : base + w], buf_pos[base : base + w] = keys[keep], pos[keep]
    theta[slot] = th
    cnt[r] = w
    if may_stop and w > cap - 2 * BN:
        tq_out[slot] = tq[r]
        tq[r] = -np.inf
        resume[slot] = tile
        stops[0] += 1


def fused_flush(grid: tuple[int], block: tuple[int], args: tuple[Any, ...], shared_mem: int = 0) -> None:
    """The model of ``fused_flush``."""
    (num_p, slots, slot_base, row_src, list_row, qx, x, order, d, qcore, core2, cap, buf_key, buf_pos, count,
     tq, m, list_ids, list_keys, theta, scale2) = args  # fmt: skip
    del grid, block, shared_mem, d
    for p in range(int(num_p)):
        c = int(count[p])
        if c == 0:
            continue
        slot = int(slots[p]) if slots is not None else int(slot_base) + p
        row = int(row_src[slot]) if row_src is not None else slot
        at = int(list_row[slot]) if list_row is not None else slot
        base = p * int(cap)
        keys = buf_key[base : base + c]
        pos = buf_pos[base : base + c][keys <= tq[slot]]
        ids = np.asarray(order[pos]) if order is not None else pos.astype(np.int64)
        exact = np.zeros(ids.size)
        for k in range(x.shape[1]):  # the contract's formula, dimension by dimension
            diff = qx[row, k] - x[ids, k]
            exact = exact + diff * diff
        if core2 is not None:
            exact = np.maximum(np.maximum(qcore[row], core2[ids]), exact)
        all_ids = np.concatenate([list_ids[at], ids])
        all_keys = np.concatenate([list_keys[at], exact])
        none = np.iinfo(np.int64).max
        sort_ids = np.where(all_ids < 0, none, all_ids)
        best = np.lexsort((sort_ids, all_keys))[: int(m)]
        list_ids[at] = np.where(sort_ids[best] == none, -1, sort_ids[best])
        list_keys[at] = all_keys[best]
        count[p] = 0
        last = float(list_keys[at, int(m) - 1])
        if np.isfinite(last):
            theta[slot] = min(float(theta[slot]), last * float(scale2))


class ModelEngine(DeviceEngine):
    """``DeviceEngine`` on NumPy, with the models in place of the kernels; ``devices``: as many
    emulated devices (the searches split over them exactly as over GPUs)."""

    def _array_module(self) -> Any:
        return np

    def _current(self) -> int:
        return 0

    def _shared_limit(self) -> int:
        return 232448  # an H200's

    def _on(self, device: int) -> Any:
        return contextlib.nullcontext()

    #: multiprocessors of the emulated device (tests raise it so that small searches split)
    multiprocessors = 1

    def _multiprocessors(self) -> int:
        return self.multiprocessors

    def _stream(self) -> Any:
        return contextlib.nullcontext()

    def _row_squares(self, rows: Any) -> Any:
        wide = rows.astype(np.float64)
        return np.einsum("ij,ij->i", wide, wide)

    #: whether the emulated device has the wgmma builds (their host side is the same; the model
    #: runs them as the 128-row builds)
    wgmma = False

    def _wgmma_capable(self) -> bool:
        return self.wgmma

    def _kernel(self, name: str, shared: int = 0) -> Any:
        if name == "fused_flush":
            return fused_flush
        if name.startswith("fused_select_wg"):
            return fused_select(128)
        return fused_select(int(name.split("_")[2].rstrip("s")))  # fused_select_{rows}[s][_{chunk}]
