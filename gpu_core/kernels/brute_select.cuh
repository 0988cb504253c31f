// The fused selection's shared pieces (kernels/brute.cu, kernels/brute_wgmma.cu): the tiles' and
// the filter's constants, cp.async loads, the block's rows' state (set up, compacted, written back)
// and each row's selection (its buffer's compaction and the slow path that appends a row's
// candidates); the kernels keep their own products and pipelines. Design: docs/design/brute-force.md.

#define FS_BN 128                  // targets per tile (BN in brute_gpu.py)
#define FS_STAGES 3                // pipeline stages of BK coordinates (64, or 32 for the widest rows)
#define FS_ROW_BYTES 20            // shared bytes per query row besides its float16 coordinates
                                   // (the streamed builds: 4 more, the row's source row)
#define FS_SLACK 0x1p-20           // filter.SLACK
#define FS_ROUNDING 0x1p-40        // filter.ROUNDING
#define FS_SELECT_STEPS 12         // halvings of a compaction's search for a bound on the m-th entry
#define FL_SORT 512                // the flush's sort size (a list of <= 256 and a chunk of candidates)
#define FL_WARPS 4
#define FL_KC 8                    // coordinates of a flush chunk: a warp loads 4 candidates' at once
#define FL_PITCH (FL_KC + 1)       // doubles a candidate's row of the chunk takes in shared memory

__device__ __forceinline__ double fs_inf() { return __longlong_as_double(0x7FF0000000000000LL); }
__device__ __forceinline__ float fs_finf() { return __int_as_float(0x7F800000); }

// the threshold for a bound theta on the true m-th key (filter.threshold)
__device__ __forceinline__ double fs_threshold(double theta, double alpha, double beta) {
    if (isinf(theta)) return fs_inf();
    const double safe = fmax(theta, 0.0);
    return (safe * (1.0 + FS_SLACK) + alpha * sqrt(safe) + beta) * (1.0 + FS_ROUNDING);
}

// an upper bound on the exact key of a target of filtered key f (filter.upper)
__device__ __forceinline__ double fs_upper(double f, double alpha, double beta) {
    if (isinf(f)) return fs_inf();
    const double disc = fmax(alpha * alpha + 4.0 * (f + beta), 0.0);
    const double root = (alpha + sqrt(disc)) * 0.5;
    return root * root * (1.0 + FS_ROUNDING);
}

// floats as unsigned integers of the same order
__device__ __forceinline__ unsigned fs_ord(float x) {
    const unsigned u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float fs_unord(unsigned u) {
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u);
}

__device__ __forceinline__ unsigned fs_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void fs_cp16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fs_smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void fs_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void fs_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void fs_ldmatrix4(unsigned (&r)[4], const unsigned short* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fs_smem_addr(p)));
}

__device__ __forceinline__ void fs_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A stage's loads (the targets' tile; in the streamed builds the rows' chunk too): ROWS rows'
// coordinates [k0, k0 + BK) (BK + 8 halves a row); row r of the stage is row row_of(r) of src
// (negative: zeros). Each thread copies the same 16-byte piece of ROWS / STEP rows, a count known
// at compile time: a loop over the pieces from tid, its count known only at run time, spilled the
// pipeline's counters at 128 registers.
template <int THREADS, int ROWS, int BK, typename RowOf>
__device__ __forceinline__ void fs_load_rows(unsigned short* stage, const unsigned short* __restrict__ src, int dpad,
                                             int k0, int tid, RowOf row_of) {
    constexpr int CHUNKS = BK / 8;          // 16-byte pieces of a row
    constexpr int STEP = THREADS / CHUNKS;  // rows a pass
    static_assert(ROWS % STEP == 0, "whole passes");
    const int chunk = tid % CHUNKS;
#pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const int r = tid / CHUNKS + i * STEP;
        const int row = row_of(r);
        const bool valid = row >= 0;
        const unsigned short* from = src + static_cast<long long>(valid ? row : 0) * dpad + k0 + chunk * 8;
        fs_cp16(stage + r * (BK + 8) + chunk * 8, from, valid);
    }
}

// A block's share of a launch: its rows [p_lo, p_lo + rows) (BM a block, or blk_lo and blk_hi
// where the launch names them), and its targets: all n_t, or where a row's window skips some
// (blk_skip_lo and blk_skip_hi) those before skip_lo and from skip_hi on, tiles_lo tiles then the
// rest, ntiles in all.
struct FsBlock {
    int p_lo, rows, n_t, skip_lo, skip_hi, tiles_lo, ntiles;
    // a tile's first target, and the end of its targets (columns from it on are none)
    __device__ __forceinline__ int col(int tile) const {
        return tile < tiles_lo ? tile * FS_BN : skip_hi + (tile - tiles_lo) * FS_BN;
    }
    __device__ __forceinline__ int limit(int tile) const { return tile < tiles_lo ? skip_lo : n_t; }
};

template <int BM>
__device__ __forceinline__ FsBlock fs_block(int b, int num_p, int n_t, const int* __restrict__ blk_lo,
                                            const int* __restrict__ blk_hi, const int* __restrict__ blk_skip_lo,
                                            const int* __restrict__ blk_skip_hi) {
    FsBlock k;
    k.p_lo = blk_lo ? blk_lo[b] : b * BM;
    k.rows = (blk_hi ? blk_hi[b] : min(num_p, k.p_lo + BM)) - k.p_lo;
    k.n_t = n_t;
    k.skip_lo = blk_skip_lo ? blk_skip_lo[b] : n_t;
    k.skip_hi = blk_skip_hi ? blk_skip_hi[b] : n_t;
    k.tiles_lo = (k.skip_lo + FS_BN - 1) / FS_BN;
    k.ntiles = k.tiles_lo + (n_t - k.skip_hi + FS_BN - 1) / FS_BN;
    return k;
}

// The block's rows' state in shared memory, BM entries each, after the stages: the threshold of b
// (tq; -inf: the row stopped, or it is past the block's rows), of the filtered key (tk), the count
// of the row's buffer, the tile the row starts at (a relaunch resumes rows at different tiles), its
// component, and its row of qa (src, -1 past the block's rows; allocated only by the builds that
// read the rows through the stages).
struct FsRows {
    float* tq;
    float* tk;
    int* cnt;
    int* start;
    int* qcomp;
    int* src;
};

template <int BM>
__device__ __forceinline__ FsRows fs_rows_at(void* at) {
    FsRows s;
    s.tq = static_cast<float*>(at);
    s.tk = s.tq + BM;
    s.cnt = reinterpret_cast<int*>(s.tk + BM);
    s.start = s.cnt + BM;
    s.qcomp = s.start + BM;
    s.src = s.qcomp + BM;
    return s;
}

// a launch's row p: its slot (its state), and a slot's row (its data)
__device__ __forceinline__ int fs_slot(const int* __restrict__ slots, int slot_base, int p) {
    return slots ? slots[p] : slot_base + p;
}
__device__ __forceinline__ int fs_row(const int* __restrict__ row_src, int slot) {
    return row_src ? row_src[slot] : slot;
}

// A row's buffer, compacted by one warp: a value with at least m entries at or below it bounds the
// row's true m-th key as well as the m-th entry itself does, so FS_SELECT_STEPS halvings between
// the buffer's least and greatest b stand for the exact m-th (32 steps over the keys' bits cost the
// whole block a wait at its next barrier); entries over the new threshold go (order kept). A row whose
// buffer could not take two more tiles stops (where tiles remain: may_stop): resume at the tile
// whose selection comes next.
__device__ void fs_compact(int lane, int r, int p, int slot, int row, int tile, bool may_stop, int m, int cap,
                           float* buf_key, int* buf_pos, const double* __restrict__ qn2,
                           const double* __restrict__ qcore, const double* __restrict__ tcore_d,
                           const double* __restrict__ alpha, const double* __restrict__ beta, double* theta,
                           float* tq_out, int* resume, int* stops, const FsRows& s) {
    const int c = s.cnt[r];
    const long long base = static_cast<long long>(p) * cap;
    if (tcore_d) {  // under mutual reachability: b at least the target's core less qn2, rounded up
        const double n2 = qn2[row];
        for (int e = lane; e < c; e += 32)
            buf_key[base + e] =
                fmaxf(buf_key[base + e], __double2float_ru(__dsub_ru(tcore_d[buf_pos[base + e]], n2)));
        __syncwarp();
    }
    unsigned omin = 0xFFFFFFFFu, omax = 0u;
    for (int e = lane; e < c; e += 32) {
        const unsigned o = fs_ord(buf_key[base + e]);
        omin = min(omin, o);
        omax = max(omax, o);
    }
    float lo_v = fs_unord(__reduce_min_sync(0xFFFFFFFFu, omin));
    float hi_v = fs_unord(__reduce_max_sync(0xFFFFFFFFu, omax));  // at least m entries at or below it
    for (int it = 0; it < FS_SELECT_STEPS; ++it) {
        const float mid = 0.5f * lo_v + 0.5f * hi_v;
        if (!(mid < hi_v)) break;
        int k = 0;
        for (int e = lane; e < c; e += 32) k += buf_key[base + e] <= mid;
        k = __reduce_add_sync(0xFFFFFFFFu, k);
        if (k >= m)
            hi_v = mid;
        else
            lo_v = mid;
    }
    const float mth = hi_v;
    const double a = alpha[row], b = beta[row];
    double key = __dadd_ru(static_cast<double>(mth), qn2[row]);  // the m-th filtered key, rounded up
    if (qcore) key = fmax(key, qcore[row]);
    const double th = fmin(theta[slot], fs_upper(key, a, b));
    const double t = fs_threshold(th, a, b);
    const float tk = __double2float_ru(t);
    const float tq = __double2float_ru(__dsub_ru(t, qn2[row]));
    int w = 0;
    for (int e0 = 0; e0 < c; e0 += 32) {
        const int e = e0 + lane;
        float key = 0.0f;
        int pos = 0;
        bool keep = false;
        if (e < c) {
            key = buf_key[base + e];
            pos = buf_pos[base + e];
            keep = key <= tq;
        }
        const unsigned mask = __ballot_sync(0xFFFFFFFFu, keep);
        __syncwarp();
        if (keep) {
            const int dst = w + __popc(mask & ((1u << lane) - 1u));
            buf_key[base + dst] = key;
            buf_pos[base + dst] = pos;
        }
        w += __popc(mask);
        __syncwarp();
    }
    if (lane == 0) {
        theta[slot] = th;
        s.cnt[r] = w;
        s.tk[r] = tk;
        s.tq[r] = tq;
        if (may_stop && w > cap - 2 * FS_BN) {
            tq_out[slot] = tq;  // the flush's limit (s.tq now marks the row stopped)
            s.tq[r] = -fs_finf();
            resume[slot] = tile;
            atomicAdd(stops, 1);
        }
    }
}

// One row's candidates of a tile (the slow path: some product of the row passed the first test).
// A column whose filtered key is at most the row's threshold (tq against v; under mutual
// reachability also tk against the target's core, rounded down) and of another component (qcomp,
// tcomp) goes to the row's buffer as b = v, its filtered key less the row's squared norm qn2 (under
// mutual reachability the cores' part of the key is added at compaction, fs_compact). A true
// candidate's b is at most tq. The Euclidean path loads nothing; the columns' loads are issued
// together, so the path waits once, not once a column. Returns whether the buffer may no longer
// take two tiles.
__device__ __forceinline__ bool fs_append(const float (&acc2)[8], const float (&tn2)[8], int r, int col_base, int t4,
                                          int limit, int p, const float* __restrict__ tcore_f,
                                          const int* __restrict__ tcomp, float tq, float tk, int qc, int* cnt_s,
                                          float* buf_key, int* buf_pos, int cap) {
    auto col_of = [&](int j) { return col_base + (j >> 1) * 8 + 2 * t4 + (j & 1); };
    auto v_of = [&](int j) { return __fmaf_rn(-2.0f, acc2[j], tn2[j]); };
    unsigned ok = 0;  // bit j: column col_of(j) is still a candidate
#pragma unroll
    for (int j = 0; j < 8; ++j) ok |= static_cast<unsigned>(col_of(j) < limit && v_of(j) <= tq) << j;
    if (tcomp) {
        int c[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) c[j] = (ok >> j & 1u) ? tcomp[col_of(j)] : qc;
#pragma unroll
        for (int j = 0; j < 8; ++j) ok &= ~(static_cast<unsigned>(c[j] == qc) << j);
    }
    if (tcore_f) {
        float c[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) c[j] = (ok >> j & 1u) ? tcore_f[col_of(j)] : 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) ok &= ~(static_cast<unsigned>(!(c[j] <= tk)) << j);
    }
    bool over = false;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if (!(ok >> j & 1u)) continue;
        const int col = col_of(j);
        const int at = atomicAdd(&cnt_s[r], 1);
        const long long o = static_cast<long long>(p) * cap + at;
        buf_key[o] = v_of(j);
        buf_pos[o] = col;
        over |= at + 1 > cap - 2 * FS_BN;
    }
    return over;
}

// The block's rows set up (rows [p_lo, p_lo + rows) of the launch; past them, stopped rows): each
// row's start tile (the block's least and greatest to first_tile and last_start, which hold the
// block's tile count and 0 before) and, where the build has them (SRC), its source row; when
// selecting (mode 0) its thresholds from theta, its buffer's count and component, and its resume
// cleared.
template <int BM, int THREADS, bool SRC>
__device__ __forceinline__ void fs_rows_begin(const FsRows& s, int tid, int p_lo, int rows, int mode,
                                              const int* __restrict__ slots, int slot_base,
                                              const int* __restrict__ row_src, const int* __restrict__ start_tile,
                                              const double* theta, const double* __restrict__ alpha,
                                              const double* __restrict__ beta, const double* __restrict__ qn2,
                                              const int* count, const int* __restrict__ qcomp, int* resume,
                                              int* first_tile, int* last_start) {
    for (int r = tid; r < BM; r += THREADS) {
        float tq = -fs_finf(), tk = -fs_finf();
        int cnt = 0, start = 0, qc = -1, src = -1;
        if (r < rows) {
            const int p = p_lo + r;
            const int slot = fs_slot(slots, slot_base, p);
            const int row = fs_row(row_src, slot);
            src = row;
            start = start_tile ? start_tile[slot] : 0;
            atomicMin(first_tile, start);
            atomicMax(last_start, start);
            if (mode == 0) {
                const double t = fs_threshold(theta[slot], alpha[row], beta[row]);
                tk = __double2float_ru(t);
                tq = __double2float_ru(__dsub_ru(t, qn2[row]));
                cnt = count[p];
                qc = qcomp ? qcomp[row] : -1;
                resume[slot] = -1;
            }
        }
        s.tq[r] = tq;
        s.tk[r] = tk;
        s.cnt[r] = cnt;
        s.start[r] = start;
        s.qcomp[r] = qc;
        if (SRC) s.src[r] = src;
    }
}

// The resident builds' rows, once: the block's rows' float16 coordinates (zeros past its rows; qa's
// rows are padded to dpad), 16-byte piece c of row r at at(r, c) halves from As; one commit group.
template <int BM, int THREADS, typename At>
__device__ __forceinline__ void fs_load_block_rows(unsigned short* As, At at, const unsigned short* __restrict__ qa,
                                                   int dpad, int tid, int p_lo, int rows,
                                                   const int* __restrict__ slots, int slot_base,
                                                   const int* __restrict__ row_src) {
    const int row_chunks = dpad >> 3;
    for (int c = tid; c < BM * row_chunks; c += THREADS) {
        const int r = c / row_chunks, chunk = c - r * row_chunks;
        const bool valid = r < rows;
        long long src_row = 0;
        if (valid) src_row = fs_row(row_src, fs_slot(slots, slot_base, p_lo + r));
        fs_cp16(As + at(r, chunk), qa + src_row * dpad + chunk * 8, valid);
    }
    fs_commit();
}

// fs_compact of every row still selecting whose buffer holds more than `over` entries, a warp a row:
// within the loop (may_stop, before tile's selection) those that may not take two more tiles; at the
// end, all that hold more than m, so the flush rechecks only what the tightest threshold keeps
// (thresholds tighten only when a buffer fills: most rows' last one came from a few tiles).
template <int WARPS>
__device__ __forceinline__ void fs_compact_rows(const FsRows& s, int warp, int lane, int p_lo, int rows, int over,
                                                int tile, bool may_stop, const int* __restrict__ slots,
                                                int slot_base, const int* __restrict__ row_src, int m, int cap,
                                                float* buf_key, int* buf_pos, const double* __restrict__ qn2,
                                                const double* __restrict__ qcore, const double* __restrict__ tcore_d,
                                                const double* __restrict__ alpha, const double* __restrict__ beta,
                                                double* theta, float* tq_out, int* resume, int* stops) {
    for (int r = warp; r < rows; r += WARPS) {
        if (s.cnt[r] > over && s.tq[r] != -fs_finf()) {
            const int p = p_lo + r;
            const int slot = fs_slot(slots, slot_base, p);
            fs_compact(lane, r, p, slot, fs_row(row_src, slot), tile, may_stop, m, cap, buf_key, buf_pos, qn2, qcore,
                       tcore_d, alpha, beta, theta, tq_out, resume, stops, s);
        }
    }
}

// The block's rows' counts, and the final thresholds of those still selecting (a stopped row's was
// written as it stopped), back to device memory.
template <int THREADS>
__device__ __forceinline__ void fs_rows_end(const FsRows& s, int tid, int p_lo, int rows,
                                            const int* __restrict__ slots, int slot_base, int* count, float* tq_out) {
    for (int r = tid; r < rows; r += THREADS) {
        const int p = p_lo + r;
        count[p] = s.cnt[r];
        if (s.tq[r] != -fs_finf()) tq_out[fs_slot(slots, slot_base, p)] = s.tq[r];
    }
}

// the fused selection kernels' parameters (kernels/brute.cu and kernels/brute_wgmma.cu)
#define FUSED_SELECT_PARAMS                                                                                      \
    const unsigned short *qa, const int *row_src, const int *slots, int slot_base, int num_p, const int *blk_lo, \
        const int *blk_hi, const int *blk_skip_lo, const int *blk_skip_hi, int dpad, const unsigned short *tb,   \
        int n_t, const float *tn2f, const float *tcore_f, const double *tcore_d, const int *tcomp,               \
        const double *qn2, const double *qcore, const int *qcomp, const double *alpha, const double *beta,      \
        double *theta, float *tq_out, int *count, const int *start_tile, int *resume, int *stops, float *buf_key, \
        int *buf_pos, int cap, int m, int mode, float *dump
#define FUSED_SELECT_ARGS                                                                                         \
    qa, row_src, slots, slot_base, num_p, blk_lo, blk_hi, blk_skip_lo, blk_skip_hi, dpad, tb, n_t, tn2f, tcore_f, \
        tcore_d, tcomp, qn2, qcore, qcomp, alpha, beta, theta, tq_out, count, start_tile, resume, stops, buf_key,  \
        buf_pos, cap, m, mode, dump
