// HDBSCAN* of a dense precomputed distance matrix (gpu_core/_points/precomputed.py states it): each
// row's k-th smallest entry (its core distance), and Borůvka rounds in which every row finds its
// lightest edge to another component, max(core_i, core_j, D[i, j]) (with an asymmetric matrix the
// lighter of D[i, j] and D[j, i]), under the tie rule (key, min(i, j), max(i, j)). The rounds'
// other steps (offer_pairs, link_components, compress) are emst.cu's. Entries are read as `v + 0.0`,
// so -0.0 counts as +0.0 and every key's bits order as its value (keys are >= 0 or +inf).

#define PRE_INF_BITS 0x7FF0000000000000ULL
#define PRE_NO_PAIR 0xFFFFFFFFFFFFFFFFULL

__device__ __forceinline__ unsigned long long pre_bits(double v) {
    return static_cast<unsigned long long>(__double_as_longlong(v));
}

// One block per row: the k-th smallest entry (1 <= k <= n), by radix select over the bits, 8 at a
// time from the top (non-negative doubles and +inf order as their bits).
extern "C" __global__ void row_kth(const double* __restrict__ matrix, long long n, int k, double* __restrict__ out) {
    __shared__ unsigned int hist[256];
    __shared__ unsigned long long chosen;
    __shared__ int remaining;
    for (long long i = blockIdx.x; i < n; i += gridDim.x) {
        const double* row = matrix + i * n;
        unsigned long long prefix = 0, mask = 0;
        int want = k;
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int t = threadIdx.x; t < 256; t += blockDim.x) hist[t] = 0;
            __syncthreads();
            for (long long j = threadIdx.x; j < n; j += blockDim.x) {
                const unsigned long long b = pre_bits(row[j] + 0.0);
                if ((b & mask) == prefix) atomicAdd(&hist[(b >> shift) & 255ULL], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                int below = 0, digit = 0;
                for (; digit < 255; ++digit) {
                    if (below + static_cast<int>(hist[digit]) >= want) break;
                    below += static_cast<int>(hist[digit]);
                }
                remaining = want - below;
                chosen = prefix | (static_cast<unsigned long long>(digit) << shift);
            }
            __syncthreads();
            want = remaining;
            prefix = chosen;
            mask |= 255ULL << shift;
            __syncthreads();
        }
        if (threadIdx.x == 0) out[i] = __longlong_as_double(static_cast<long long>(prefix));
        __syncthreads();
    }
}

__device__ __forceinline__ bool pre_less(double w, unsigned long long pair, double bw, unsigned long long bp) {
    return w < bw || (w == bw && pair < bp);
}

// One block per row: its lightest edge to another component (best_w, best_pair: +inf and no pair
// when every point is in its component), lowering its component's bound (atomicMin on the bits).
extern "C" __global__ void dense_nearest(const double* __restrict__ matrix, long long n, const double* __restrict__ core,
                                         const int* __restrict__ comp, int symmetric,
                                         unsigned long long* __restrict__ bound, double* __restrict__ best_w,
                                         unsigned long long* __restrict__ best_pair) {
    __shared__ double share_w[32];
    __shared__ unsigned long long share_p[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (long long i = blockIdx.x; i < n; i += gridDim.x) {
        const int c = comp[i];
        const double ci = core[i];
        const double* row = matrix + i * n;
        double bw = __longlong_as_double(static_cast<long long>(PRE_INF_BITS));
        unsigned long long bp = PRE_NO_PAIR;
        for (long long j = threadIdx.x; j < n; j += blockDim.x) {
            if (comp[j] == c) continue;
            double w = row[j] + 0.0;
            if (!symmetric) w = fmin(w, matrix[j * n + i] + 0.0);
            w = fmax(w, fmax(ci, core[j]));
            const unsigned long long pair = i < j ? (static_cast<unsigned long long>(i) << 32) | static_cast<unsigned long long>(j)
                                                  : (static_cast<unsigned long long>(j) << 32) | static_cast<unsigned long long>(i);
            if (pre_less(w, pair, bw, bp)) {
                bw = w;
                bp = pair;
            }
        }
        for (int offset = 16; offset > 0; offset >>= 1) {
            const double ow = __shfl_down_sync(0xFFFFFFFFu, bw, offset);
            const unsigned long long op = __shfl_down_sync(0xFFFFFFFFu, bp, offset);
            if (pre_less(ow, op, bw, bp)) {
                bw = ow;
                bp = op;
            }
        }
        if (lane == 0) {
            share_w[warp] = bw;
            share_p[warp] = bp;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < warps; ++w)
                if (pre_less(share_w[w], share_p[w], bw, bp)) {
                    bw = share_w[w];
                    bp = share_p[w];
                }
            best_w[i] = bw;
            best_pair[i] = bp;
            if (bp != PRE_NO_PAIR) atomicMin(&bound[c], pre_bits(bw));
        }
        __syncthreads();
    }
}
