// Brute-force searches on Hopper's warpgroup tensor-core instructions (wgmma; sm_90a only: the
// host builds this file for compute capability 9.0 alone, gpu_core/_backend/kernels.py).
//
// fused_select_wg / fused_select_wgs: kernels/brute.cu's fused_select_128 and fused_select_128s
// (the same rows, parameters, selection, compaction, stops and resumes; brute_select.cuh holds the
// shared pieces), with the products on wgmma instead of mma.sync: each of the block's two
// warpgroups multiplies its 64 rows with the tile's 128 targets (m64n128k16, float16 in, float32
// accumulated), both operands read by the tensor cores straight from shared memory, so no warp
// loads fragments into registers (mma.sync's ldmatrix traffic was what held its products at
// 230-330 TFLOP/s). Stages hold 64 coordinates a row: one 128-byte row, the layout the tensor
// cores read (K-major, 128-byte swizzle: 16-byte piece c of row r at r * 128 + ((c ^ r % 8) * 16)
// bytes in an atom of 8 rows at a 1,024-byte boundary). fused_select_wg keeps the block's rows
// resident (one such tile of 128 rows per 64 coordinates); fused_select_wgs streams them through
// the stages beside the targets' chunk. A tile's squared norms come with its last chunk.
//
// The products' bits are not mma.sync's (another order of accumulation): the filter's bound holds
// for any order (filter.py), and the tests check these products against the float16 rows' exact
// ones within float32 accumulation, and the lists and trees against the host's.
//
// Design: docs/design/brute-force.md.

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "brute_wgmma.cu needs the sm_90a target (wgmma)"
#endif

#include "brute_select.cuh"

#define WG_BK 64   // coordinates a stage: one 128-byte swizzled row
#define WG_ROW 64  // halves a row of a stage takes (no padding: the swizzle spreads the banks)

// offset in halves of 16-byte piece c of row r of a swizzled tile (the tile at a 1,024-byte boundary)
__device__ __forceinline__ int wg_at(int r, int c) { return r * WG_ROW + ((c ^ (r & 7)) << 3); }

// a shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, atoms of 8 rows
// 1,024 bytes apart (stride byte offset), the leading byte offset unused by this layout (1)
__device__ __forceinline__ unsigned long long wg_desc(const unsigned short* p) {
    const unsigned long long addr = fs_smem_addr(p);
    return ((addr & 0x3FFFFull) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// the accumulators are written by the asynchronous wgmma: no use may move across its issue or wait
__device__ __forceinline__ void wg_hold(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// cp.async's writes to shared memory made visible to the tensor cores' reads (the async proxy)
__device__ __forceinline__ void wg_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wg_cp4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(fs_smem_addr(dst)), "l"(src));
}

// A stage's loads, swizzled: ROWS rows' coordinates [k0, k0 + 64); row r of the stage is row
// row_of(r) of src (negative: zeros); each thread copies the same 16-byte piece of ROWS / 32 rows.
template <int THREADS, int ROWS, typename RowOf>
__device__ __forceinline__ void wg_load_rows(unsigned short* stage, const unsigned short* __restrict__ src, int dpad,
                                             int k0, int tid, RowOf row_of) {
    constexpr int STEP = THREADS / 8;  // rows a pass (8 pieces a row)
    static_assert(ROWS % STEP == 0, "whole passes");
    const int chunk = tid & 7;
#pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const int r = (tid >> 3) + i * STEP;
        const int row = row_of(r);
        const bool valid = row >= 0;
        const unsigned short* from = src + static_cast<long long>(valid ? row : 0) * dpad + k0 + chunk * 8;
        fs_cp16(stage + wg_at(r, chunk), from, valid);
    }
}
// d (+)= A B^T over 16 coordinates: A 64 rows, B 128 targets, both K-major in shared memory (da,
// db); scale_d 0 overwrites d
__device__ __forceinline__ void wg_mma(float (&d)[64], unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}
// mode 0: select; 1: the products alone; 2: every product written to dump[p * n_t + column]. The
// loop is fused_select_body's (kernels/brute.cu). The accumulators: thread (g, t4) of warp w holds
// the products of rows 16 w + g + 8 h (h = 0, 1; warp w is in warpgroup w / 4, rows 64 (w / 4) on)
// and columns 8 j + 2 t4 + e (j < 16, e = 0, 1) as acc[4 j + 2 h + e]. The fast path takes, per row
// and quarter of the tile (32 columns), the least v = fma(-2, s, tn2); a (row, quarter) that passes
// takes the slow path (fs_append, the quarter's eight products of the row).
template <bool STREAM_A>
__device__ __forceinline__ void fused_select_wg_body(FUSED_SELECT_PARAMS) {
    constexpr int BM = 128, BK = WG_BK, WARPS = 8, THREADS = 256;
    constexpr int A_SLAB = BM * WG_ROW;    // halves: the block's rows, 64 coordinates
    constexpr int B_STAGE = FS_BN * WG_ROW;  // halves: a tile's targets, 64 coordinates
    extern __shared__ __align__(16) unsigned char wg_smem_raw[];
    // the tiles at a 1,024-byte boundary (the swizzle's atoms); the host allows 1,024 bytes for it
    unsigned char* wg_smem = wg_smem_raw + ((1024u - (fs_smem_addr(wg_smem_raw) & 1023u)) & 1023u);
    // resident: the rows in dpad / 64 slabs of 64 coordinates; streamed: FS_STAGES stages of them
    unsigned short* As = reinterpret_cast<unsigned short*>(wg_smem);
    unsigned short* Bs = As + (STREAM_A ? FS_STAGES : dpad / BK) * A_SLAB;
    float* tn_s = reinterpret_cast<float*>(Bs + FS_STAGES * B_STAGE);  // a stage's tile's norms
    const FsRows rs = fs_rows_at<BM>(tn_s + FS_STAGES * FS_BN);
    __shared__ int first_tile, last_start;
    __shared__ int over_s[2];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const FsBlock blk = fs_block<BM>(blockIdx.x, num_p, n_t, blk_lo, blk_hi, blk_skip_lo, blk_skip_hi);
    const int p_lo = blk.p_lo, rows = blk.rows, ntiles = blk.ntiles;

    if (tid == 0) {
        first_tile = ntiles;
        last_start = 0;
        over_s[0] = over_s[1] = 0;
    }
    __syncthreads();
    fs_rows_begin<BM, THREADS, true>(rs, tid, p_lo, rows, mode, slots, slot_base, row_src, start_tile, theta, alpha,
                                     beta, qn2, count, qcomp, resume, &first_tile, &last_start);
    if (!STREAM_A)  // the block's rows, once, in slabs of 64 coordinates
        fs_load_block_rows<BM, THREADS>(
            As, [&](int r, int chunk) { return (chunk >> 3) * A_SLAB + wg_at(r, chunk & 7); }, qa, dpad, tid, p_lo,
            rows, slots, slot_base, row_src);
    __syncthreads();  // first_tile, last_start, rs.src

    const int kc_count = dpad / BK;
    const int t_begin = first_tile;
    const bool staggered = last_start != t_begin;
    const int total = (ntiles - t_begin) * kc_count;
    int load_tile = t_begin, load_kc = 0, load_stage = 0;
    auto load_next = [&]() {
        if (load_tile < ntiles) {
            const int col0 = blk.col(load_tile);
            if (STREAM_A)
                wg_load_rows<THREADS, BM>(As + load_stage * A_SLAB, qa, dpad, load_kc * BK, tid,
                                          [&](int r) { return rs.src[r]; });
            wg_load_rows<THREADS, FS_BN>(Bs + load_stage * B_STAGE, tb, dpad, load_kc * BK, tid,
                                         [&](int r) { return col0 + r < n_t ? col0 + r : -1; });
            if (mode == 0 && load_kc == kc_count - 1 && tid < FS_BN) {
                // the tile's norms, with its last chunk; +inf for columns past its targets, so their
                // filtered keys are +inf and the fast path needs no test of the column
                const int col = col0 + tid;
                float* at = tn_s + load_stage * FS_BN + tid;
                if (col < blk.limit(load_tile))
                    wg_cp4(at, tn2f + col);
                else
                    *at = fs_finf();
            }
        }
        fs_commit();
        load_stage = load_stage + 1 == FS_STAGES ? 0 : load_stage + 1;
        if (++load_kc == kc_count) {
            load_kc = 0;
            ++load_tile;
        }
    };
    for (int s = 0; s < FS_STAGES - 1; ++s) load_next();

    const int wg = warp >> 2;  // the warpgroup: rows 64 wg on
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    int tile = t_begin, kc = 0, stage = 0;

    for (int it = 0; it < total; ++it) {
        fs_wait<FS_STAGES - 2>();
        wg_proxy_fence();
        __syncthreads();
        load_next();
        if (kc == 0 && over_s[(tile - 1) & 1]) {  // the last tile filled a buffer: compact it first
            __syncthreads();
            if (tid == 0) over_s[(tile - 1) & 1] = 0;
            fs_compact_rows<WARPS>(rs, warp, lane, p_lo, rows, cap - 2 * FS_BN, tile, true, slots, slot_base, row_src,
                                   m, cap, buf_key, buf_pos, qn2, qcore, tcore_d, alpha, beta, theta, tq_out, resume,
                                   stops);
            __syncthreads();
        }
        const bool last = kc == kc_count - 1;
        const unsigned short* a_at = (STREAM_A ? As + stage * A_SLAB : As + kc * A_SLAB) + wg * 64 * WG_ROW;
        const unsigned long long da = wg_desc(a_at), db = wg_desc(Bs + stage * B_STAGE);
        wg_hold(acc);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks)  // 16 coordinates = 32 bytes = 2 in the descriptors' units
            wg_mma(acc, da + 2 * ks, db + 2 * ks, kc > 0 || ks > 0);
        wg_commit();
        wg_wait_all();
        wg_hold(acc);
        const int this_tile = tile, this_stage = stage;
        stage = stage + 1 == FS_STAGES ? 0 : stage + 1;
        if (++kc == kc_count) {
            kc = 0;
            ++tile;
        }
        if (!last || mode == 1) continue;

        const int limit = blk.limit(this_tile);
        const int tile_col = blk.col(this_tile);
        const int lim_rel = limit - tile_col;  // the tile's columns [0, lim_rel) are targets
        if (mode == 2) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp * 16 + g + 8 * h;
                if (r >= rows) continue;
#pragma unroll
                for (int j = 0; j < 16; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int c = 8 * j + 2 * t4 + e;
                        if (c < lim_rel)
                            dump[static_cast<long long>(p_lo + r) * n_t + tile_col + c] = acc[4 * j + 2 * h + e];
                    }
            }
            continue;
        }
        const float* tn = tn_s + this_stage * FS_BN;
        float tq[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = warp * 16 + g + 8 * h;
            tq[h] = (staggered && this_tile < rs.start[r]) ? -fs_finf() : rs.tq[r];
        }
        unsigned pass = 0;  // bit 2 q + h: row h has a product of quarter q under its threshold
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float least0 = fs_finf(), least1 = fs_finf();
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int j = 4 * q + jj;
                const float2 t = *reinterpret_cast<const float2*>(tn + 8 * j + 2 * t4);
#pragma unroll
                for (int e = 0; e < 2; ++e) {  // a column past the targets: tv = +inf, so v = +inf (s is finite)
                    const float tv = e ? t.y : t.x;
                    least0 = fminf(least0, __fmaf_rn(-2.0f, acc[4 * j + e], tv));
                    least1 = fminf(least1, __fmaf_rn(-2.0f, acc[4 * j + 2 + e], tv));
                }
            }
            if (least0 <= tq[0]) pass |= 1u << (2 * q);
            if (least1 <= tq[1]) pass |= 1u << (2 * q + 1);
        }
        bool over = false;
        while (pass) {
            const int i = __ffs(pass) - 1;
            pass &= pass - 1;
            const int q = i >> 1, h = i & 1;
            float acc2[8], tn2[8];
#pragma unroll
            for (int qq = 0; qq < 4; ++qq)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            if (i == 2 * qq + hh) acc2[2 * jj + e] = acc[4 * (4 * qq + jj) + 2 * hh + e];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e) tn2[2 * jj + e] = tn[32 * q + 8 * jj + 2 * t4 + e];
            const int r = warp * 16 + g + 8 * h;
            over |= fs_append(acc2, tn2, r, tile_col + 32 * q, t4, limit, p_lo + r, tcore_f, tcomp, rs.tq[r],
                              rs.tk[r], rs.qcomp[r], rs.cnt, buf_key, buf_pos, cap);
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

// the block's rows resident in shared memory (dpad / 64 tiles of 16 KiB)
extern "C" __global__ void __launch_bounds__(256, 2) fused_select_wg(FUSED_SELECT_PARAMS) {
    fused_select_wg_body<false>(FUSED_SELECT_ARGS);
}

// the block's rows streamed through the stages beside the targets (shared memory independent of d)
extern "C" __global__ void __launch_bounds__(256, 2) fused_select_wgs(FUSED_SELECT_PARAMS) {
    fused_select_wg_body<true>(FUSED_SELECT_ARGS);
}
