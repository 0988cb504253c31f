// Brute-force searches of points of many coordinates (gpu_core/_points/brute_gpu.py; the filter's
// bound and why no true candidate is lost: gpu_core/_points/filter.py).
//
// fused_select_128 / fused_select_64: float16 tensor-core products (mma.sync m16n8k16, float32
// accumulation) of a block of query rows, kept in shared memory, with every tile of 128 targets,
// streamed through a cp.async pipeline; and in the same kernel each row's selection, so the products
// never reach device memory and the host waits on nothing per tile. A row keeps a target whose
// filtered key is at most its threshold: b, the key less the row's squared norm (v below, exact in
// float32, so keeping a target loads nothing), and the target's position go to the row's buffer in
// device memory. A buffer that might not take the next tile is compacted by one warp: its m-th
// smallest b (under mutual reachability first raised to the target's core less qn2, rounded up)
// plus qn2, rounded up, gives the row a tighter bound on its true m-th key (theta) and threshold,
// and the entries over the threshold (b > tq) go. The selection's slow path is one copy of code a
// row, inlined: a call there spilled the warp's registers at every candidate, and every warp of the
// block waits at the next barrier for the slowest. A row whose buffer still cannot take a whole
// tile stops and says where (resume): the host flushes it and launches it again from there, so any
// number of ties and near-ties is exact.
// fused_select_128s / fused_select_128s_32, the streamed builds: the same products (the same
// fragments into the same mma instructions in the same order, so the same bits) with the block's
// rows not resident: each pipeline stage holds the rows' chunk of BK coordinates beside the
// targets', so shared memory does not grow with d and two blocks of 128 rows fit a multiprocessor
// at any width (on an H200 resident rows leave one past 192 coordinates with stages of 64, and
// at 768 with stages of 32), for the rows read again (from L2) at every tile.
// fused_flush: each row's surviving candidates rechecked exactly (float64, dimension order, no FMA:
// the host's squared_distances) and merged into its list of the m least (exact key, point id).
//
// Units. The float16 rows are sigma * (x - mu) rounded (sigma a power of two); filtered keys,
// thresholds and theta are in those units (sigma^2 times a squared distance), the lists' exact keys
// in the caller's. Per target: its float16 row, its squared norm (float32), under mutual
// reachability its squared core distance scaled (float32 rounded down for the test, float64 for the
// stored key) and its component. A filtered key is v + qn2 with v = fma(-2, s, tn2) (s the
// accumulated product), under mutual reachability max(qcore, tcore, v + qn2); a target of the row's
// own component is no candidate. A query row's data by its row (row_src[slot], or the slot): its
// float16 and float64 coordinates, qn2, alpha and beta of the margin E(x) = alpha sqrt(x) + beta,
// core and component; its state by slot: theta, the final threshold (tq_out), resume, its list
// (at list_row[slot], or the slot); buffers and counts by the row's place p in the launch.
//
// Design: docs/design/brute-force.md.

#include "brute_select.cuh"

// mode 0: select; 1: the products alone (nothing selected: the arithmetic's time); 2: every product
// written to dump[p * n_t + column] (tests of the fragments' layout).
//
// The loop runs over (tile, chunk of BK coordinates) with the next stages' loads in flight. After
// a tile's last chunk, its selection: thread (g, t4) of warp (wm, wn) holds the products of rows
// wm*64 + mt*16 + g (+8) and columns wn*32 + nt*8 + 2*t4 (+1); the fast path takes, per row, the
// least v = fma(-2, s, tn2) of its columns (two operations a product) and compares it with the
// row's threshold; a row that passes takes the slow path (fs_append). A buffer that may not take
// two more tiles raises over_s, and the compaction runs at the next tile's first chunk, after the
// loop's barrier: no barrier of its own unless a row needs one.
template <int BM, int BK, bool STREAM_A>
__device__ __forceinline__ void fused_select_body(
    const unsigned short* __restrict__ qa, const int* __restrict__ row_src, const int* __restrict__ slots,
    int slot_base, int num_p, const int* __restrict__ blk_lo, const int* __restrict__ blk_hi,
    const int* __restrict__ blk_skip_lo, const int* __restrict__ blk_skip_hi, int dpad,
    const unsigned short* __restrict__ tb, int n_t, const float* __restrict__ tn2f,
    const float* __restrict__ tcore_f, const double* __restrict__ tcore_d, const int* __restrict__ tcomp,
    const double* __restrict__ qn2, const double* __restrict__ qcore, const int* __restrict__ qcomp,
    const double* __restrict__ alpha, const double* __restrict__ beta, double* theta, float* tq_out,
    int* count, const int* __restrict__ start_tile, int* resume, int* stops, float* buf_key, int* buf_pos,
    int cap, int m, int mode, float* dump) {
    constexpr int WARPS = BM / 64 * 4;
    constexpr int THREADS = WARPS * 32;
    constexpr int BROW = BK + 8;  // halves per row of a stage: conflict-free ldmatrix
    extern __shared__ __align__(16) unsigned char fs_smem[];
    // resident: the block's rows whole (BM x (dpad + 8)); streamed: FS_STAGES stages of their
    // coordinates [k0, k0 + BK) (BM x BROW each), loaded with the targets' chunk
    const int astride = STREAM_A ? BROW : dpad + 8;
    unsigned short* As = reinterpret_cast<unsigned short*>(fs_smem);
    unsigned short* Bs = As + (STREAM_A ? FS_STAGES * BM * BROW : BM * astride);
    const FsRows rs = fs_rows_at<BM>(Bs + FS_STAGES * FS_BN * BROW);  // src: streamed only
    __shared__ int first_tile, last_start;
    // per tile parity: a tile's selection raises its own flag while the next tile's first chunk reads
    // the last one's, so no barrier interval both reads and writes one flag (d <= BK: one chunk a tile)
    __shared__ int over_s[2];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;  // the warp's 64 x 32 part of the block's BM x 128 tile
    const int g = lane >> 2, t4 = lane & 3;
    const FsBlock blk = fs_block<BM>(blockIdx.x, num_p, n_t, blk_lo, blk_hi, blk_skip_lo, blk_skip_hi);
    const int p_lo = blk.p_lo, rows = blk.rows, ntiles = blk.ntiles;

    if (tid == 0) {
        first_tile = ntiles;
        last_start = 0;
        over_s[0] = over_s[1] = 0;
    }
    __syncthreads();
    fs_rows_begin<BM, THREADS, STREAM_A>(rs, tid, p_lo, rows, mode, slots, slot_base, row_src, start_tile, theta,
                                         alpha, beta, qn2, count, qcomp, resume, &first_tile, &last_start);
    if (!STREAM_A)  // the block's rows, once (rows of dpad + 8 halves: conflict-free ldmatrix)
        fs_load_block_rows<BM, THREADS>(As, [&](int r, int chunk) { return r * astride + chunk * 8; }, qa, dpad, tid,
                                        p_lo, rows, slots, slot_base, row_src);
    __syncthreads();  // first_tile, last_start (and rs.src)

    const int kc_count = dpad / BK;
    const int t_begin = first_tile;
    const bool staggered = last_start != t_begin;  // a relaunch: rows start at different tiles
    const int total = (ntiles - t_begin) * kc_count;
    // the loads run FS_STAGES - 1 chunks ahead: their own (tile, chunk) and column
    int load_tile = t_begin, load_kc = 0, load_stage = 0;
    auto load_next = [&]() {
        if (load_tile < ntiles) {
            const int col0 = blk.col(load_tile);
            if (STREAM_A)  // the rows' chunk and the targets', one stage
                fs_load_rows<THREADS, BM, BK>(As + load_stage * BM * BROW, qa, dpad, load_kc * BK, tid,
                                              [&](int r) { return rs.src[r]; });
            fs_load_rows<THREADS, FS_BN, BK>(Bs + load_stage * FS_BN * BROW, tb, dpad, load_kc * BK, tid,
                                             [&](int r) { return col0 + r < n_t ? col0 + r : -1; });
        }
        fs_commit();
        load_stage = load_stage + 1 == FS_STAGES ? 0 : load_stage + 1;
        if (++load_kc == kc_count) {
            load_kc = 0;
            ++load_tile;
        }
    };
    for (int s = 0; s < FS_STAGES - 1; ++s) load_next();

    // ldmatrix lanes: A rows (lane & 7) + 8 * bit 3, coordinates + 8 * bit 4; B target rows
    // (lane & 7) + 8 * bit 4, coordinates + 8 * bit 3
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_k = (lane >> 4) * 8;
    const int b_row = (lane & 7) + (lane >> 4) * 8, b_k = ((lane >> 3) & 1) * 8;
    const unsigned short* a_base = As + (wm * 64 + a_row) * astride + a_k;
    float acc[4][4][4];
    int tile = t_begin, kc = 0, stage = 0;

    for (int it = 0; it < total; ++it) {
        fs_wait<FS_STAGES - 2>();
        __syncthreads();
        load_next();
        if (kc == 0) {
            if (over_s[(tile - 1) & 1]) {  // the last tile filled a buffer: compact it before this selection
                __syncthreads();
                if (tid == 0) over_s[(tile - 1) & 1] = 0;
                fs_compact_rows<WARPS>(rs, warp, lane, p_lo, rows, cap - 2 * FS_BN, tile, true, slots, slot_base,
                                       row_src, m, cap, buf_key, buf_pos, qn2, qcore, tcore_d, alpha, beta, theta,
                                       tq_out, resume, stops);
                __syncthreads();
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
        }
        const bool last = kc == kc_count - 1;
        const int col_base = blk.col(tile) + wn * 32;
        float tn2[8];
        if (last && mode == 0) {  // the tile's norms, in flight while the last chunk multiplies
            const int limit = blk.limit(tile);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int col = col_base + (j >> 1) * 8 + 2 * t4 + (j & 1);
                tn2[j] = col < limit ? tn2f[col] : fs_finf();
            }
        }
        const unsigned short* b_base = Bs + stage * FS_BN * BROW + (wn * 32 + b_row) * BROW + b_k;
        // the rows' chunk: streamed, this stage's (from its coordinate 0); resident, at kc * BK
        const unsigned short* a_at = STREAM_A ? a_base + stage * BM * BROW : a_base;
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            unsigned af[4][4], bf[4][2];
            const int k = (STREAM_A ? 0 : kc * BK) + ks * 16;
#pragma unroll
            for (int mt = 0; mt < 4; ++mt) fs_ldmatrix4(af[mt], a_at + mt * 16 * astride + k);
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                unsigned r4[4];
                fs_ldmatrix4(r4, b_base + np * 16 * BROW + ks * 16);
                bf[2 * np][0] = r4[0];
                bf[2 * np][1] = r4[1];
                bf[2 * np + 1][0] = r4[2];
                bf[2 * np + 1][1] = r4[3];
            }
#pragma unroll
            for (int mt = 0; mt < 4; ++mt)
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) fs_mma(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
        }
        const int this_tile = tile;
        stage = stage + 1 == FS_STAGES ? 0 : stage + 1;
        if (++kc == kc_count) {
            kc = 0;
            ++tile;
        }
        if (!last || mode == 1) continue;

        const int limit = blk.limit(this_tile);
        if (mode == 2) {
#pragma unroll
            for (int mt = 0; mt < 4; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = wm * 64 + mt * 16 + g + 8 * h;
                    if (r >= rows) continue;
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int col = col_base + nt * 8 + 2 * t4 + e;
                            if (col < limit) dump[static_cast<long long>(p_lo + r) * n_t + col] = acc[mt][nt][2 * h + e];
                        }
                }
            continue;
        }
        bool over = false;
        unsigned pass = 0;  // bit 2 mt + h: row wm*64 + mt*16 + g + 8h has a product under its threshold
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = wm * 64 + mt * 16 + g + 8 * h;
                float tq = rs.tq[r];
                if (staggered && this_tile < rs.start[r]) tq = -fs_finf();
                float least = fs_finf();
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        least = fminf(least, __fmaf_rn(-2.0f, acc[mt][nt][2 * h + e], tn2[2 * nt + e]));
                if (least <= tq) pass |= 1u << (2 * mt + h);
            }
        // the slow path, one row at a time (one copy of its code: no call, nothing spilled), its
        // products picked out of the accumulators by predicated moves
        while (pass) {
            const int i = __ffs(pass) - 1;
            pass &= pass - 1;
            float acc2[8];
#pragma unroll
            for (int mt = 0; mt < 4; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            if (i == 2 * mt + h) acc2[2 * nt + e] = acc[mt][nt][2 * h + e];
            const int r = wm * 64 + (i >> 1) * 16 + g + 8 * (i & 1);
            over |= fs_append(acc2, tn2, r, col_base, t4, limit, p_lo + r, tcore_f, tcomp, rs.tq[r], rs.tk[r],
                              rs.qcomp[r], rs.cnt, buf_key, buf_pos, cap);
        }
        if (over) over_s[this_tile & 1] = 1;
    }
    fs_wait<0>();
    if (mode != 0) return;
    __syncthreads();
    fs_compact_rows<WARPS>(rs, warp, lane, p_lo, rows, m, ntiles, false, slots, slot_base, row_src, m, cap, buf_key,
                           buf_pos, qn2, qcore, tcore_d, alpha, beta, theta, tq_out, resume, stops);
    __syncthreads();
    fs_rows_end<THREADS>(rs, tid, p_lo, rows, slots, slot_base, count, tq_out);
}

#ifndef FS_MIN_BLOCKS_128
#define FS_MIN_BLOCKS_128 2  // blocks of 128 rows per multiprocessor the registers are capped for
#endif

// 128 query rows a block (8 warps), stages of 64 coordinates: rows of up to 448 coordinates
extern "C" __global__ void __launch_bounds__(256, FS_MIN_BLOCKS_128) fused_select_128(FUSED_SELECT_PARAMS) {
    fused_select_body<128, 64, false>(FUSED_SELECT_ARGS);
}

// 128 query rows a block, stages of 32 coordinates: up to what 227 KB of shared memory holds (768)
extern "C" __global__ void __launch_bounds__(256, 1) fused_select_128_32(FUSED_SELECT_PARAMS) {
    fused_select_body<128, 32, false>(FUSED_SELECT_ARGS);
}

// 64 query rows a block (4 warps), stages of 32 coordinates: up to 1,024 coordinates
extern "C" __global__ void __launch_bounds__(128, 4) fused_select_64(FUSED_SELECT_PARAMS) {
    fused_select_body<64, 32, false>(FUSED_SELECT_ARGS);
}

// The streamed builds: 128 rows a block, each stage holding the rows' chunk beside the targets'
// (shared memory independent of d: two blocks a multiprocessor at any width), stages of 64 or 32
// coordinates
extern "C" __global__ void __launch_bounds__(256, 2) fused_select_128s(FUSED_SELECT_PARAMS) {
    fused_select_body<128, 64, true>(FUSED_SELECT_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) fused_select_128s_32(FUSED_SELECT_PARAMS) {
    fused_select_body<128, 32, true>(FUSED_SELECT_ARGS);
}

__device__ __forceinline__ bool fl_less(double ka, long long ia, double kb, long long ib) {
    return ka < kb || (ka == kb && ia < ib);
}

// the first `fill` entries sorted by (key, id) (bitonic, padded to a power of two): the m least first
__device__ void fl_sort(int lane, int fill, double* keys, long long* ids) {
    const long long none = 0x7FFFFFFFFFFFFFFFLL;
    int size = 1;
    while (size < fill) size <<= 1;
    for (int e = fill + lane; e < size; e += 32) {
        keys[e] = fs_inf();
        ids[e] = none;
    }
    __syncwarp();
    for (int width = 2; width <= size; width <<= 1) {
        for (int stride = width >> 1; stride > 0; stride >>= 1) {
            for (int e = lane; e < size; e += 32) {
                const int other = e ^ stride;
                if (other > e) {
                    const bool up = (e & width) == 0;
                    const bool swap = up ? fl_less(keys[other], ids[other], keys[e], ids[e])
                                         : fl_less(keys[e], ids[e], keys[other], ids[other]);
                    if (swap) {
                        const double tk = keys[e];
                        const long long ti = ids[e];
                        keys[e] = keys[other];
                        ids[e] = ids[other];
                        keys[other] = tk;
                        ids[other] = ti;
                    }
                }
            }
            __syncwarp();
        }
    }
}

// Each row's buffered candidates at most its final threshold (b <= tq), rechecked exactly and merged into its
// list of the m least (exact key, point id); theta becomes the list's m-th key (scaled) when lower,
// the buffer empties. qx: the rows' float64 coordinates; x: the targets' (by point id); order:
// target position -> point id (null: the identity); cores unscaled, qcore by row and core2 by point
// id (null: Euclidean).
//
// The recheck takes up to 32 candidates at a time, lane r summing the r-th one's squared differences
// in dimension order (the host's bits). Their coordinates come through shared memory in chunks of
// FL_KC: eight lanes load one candidate's chunk, so each load of the warp reads four 64-byte runs
// instead of 32 scattered doubles, and the next chunk's loads are in flight while a chunk is summed.
extern "C" __global__ void __launch_bounds__(FL_WARPS * 32) fused_flush(
    int num_p, const int* __restrict__ slots, int slot_base, const int* __restrict__ row_src,
    const int* __restrict__ list_row,
    const double* __restrict__ qx, const double* __restrict__ x, const long long* __restrict__ order, int d,
    const double* __restrict__ qcore, const double* __restrict__ core2, int cap, const float* __restrict__ buf_key,
    const int* __restrict__ buf_pos, int* count, const float* __restrict__ tq, int m, long long* list_ids,
    double* list_keys, double* theta, double scale2) {
    __shared__ double keys_s[FL_WARPS][FL_SORT];
    __shared__ long long ids_s[FL_WARPS][FL_SORT];
    __shared__ double chunk_s[FL_WARPS][32 * FL_PITCH];
    __shared__ long long cand_s[FL_WARPS][32];
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    double* keys = keys_s[w];
    long long* ids = ids_s[w];
    double* chunk = chunk_s[w];
    long long* cand = cand_s[w];
    const long long none = 0x7FFFFFFFFFFFFFFFLL;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    const int kk = lane & 7;  // the coordinate of a chunk this lane loads
    const int sub = lane >> 3;  // and the candidate among each four
    for (int p = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; p < num_p; p += warps) {
        const int c = count[p];
        if (c == 0) continue;
        const int slot = slots ? slots[p] : slot_base + p;
        const long long row = row_src ? row_src[slot] : slot;
        const double* q = qx + row * d;
        const double qc = qcore ? qcore[row] : 0.0;
        const float limit = tq[slot];
        const long long list_at = static_cast<long long>(list_row ? list_row[slot] : slot) * m;
        for (int e = lane; e < m; e += 32) {
            keys[e] = list_keys[list_at + e];
            const long long id = list_ids[list_at + e];
            ids[e] = id < 0 ? none : id;
        }
        __syncwarp();
        int fill = m;
        const long long base = static_cast<long long>(p) * cap;
        for (int e0 = 0; e0 < c; e0 += 32) {
            const int e = e0 + lane;
            const bool keep = e < c && buf_key[base + e] <= limit;
            const unsigned mask = __ballot_sync(0xFFFFFFFFu, keep);
            if (mask == 0u) continue;
            if (fill + __popc(mask) > FL_SORT) {
                fl_sort(lane, fill, keys, ids);
                fill = m;
            }
            const int kept = __popc(mask);
            if (keep) {
                const int pos = buf_pos[base + e];
                cand[__popc(mask & ((1u << lane) - 1u))] = order ? order[pos] : static_cast<long long>(pos);
            }
            __syncwarp();
            const double* rows[8];  // this lane's candidates' rows, at its coordinate of a chunk
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int r = 4 * j + sub;
                rows[j] = r < kept ? x + cand[r] * d + kk : nullptr;
            }
            double next[8];
            auto load = [&](int k0) {
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    if (rows[j] && k0 + kk < d) next[j] = rows[j][k0];
            };
            load(0);
            double acc = 0.0;
            for (int k0 = 0; k0 < d; k0 += FL_KC) {
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    if (rows[j] && k0 + kk < d) chunk[(4 * j + sub) * FL_PITCH + kk] = next[j];
                __syncwarp();
                if (k0 + FL_KC < d) load(k0 + FL_KC);  // in flight while this chunk is summed
                if (lane < kept) {
                    const int kn = min(FL_KC, d - k0);
                    for (int k = 0; k < kn; ++k) {
                        const double diff = __dsub_rn(q[k0 + k], chunk[lane * FL_PITCH + k]);
                        acc = __dadd_rn(acc, __dmul_rn(diff, diff));
                    }
                }
                __syncwarp();
            }
            if (lane < kept) {
                const long long id = cand[lane];
                if (core2) acc = fmax(fmax(qc, core2[id]), acc);
                keys[fill + lane] = acc;
                ids[fill + lane] = id;
            }
            fill += kept;
            __syncwarp();
        }
        if (fill > m) fl_sort(lane, fill, keys, ids);
        __syncwarp();
        for (int e = lane; e < m; e += 32) {
            list_keys[list_at + e] = keys[e];
            list_ids[list_at + e] = ids[e] == none ? -1 : ids[e];
        }
        if (lane == 0) {
            count[p] = 0;
            const double last = keys[m - 1];
            if (!isinf(last)) theta[slot] = fmin(theta[slot], last * scale2);
        }
        __syncwarp();
    }
}
