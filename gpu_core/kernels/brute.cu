// Brute-force searches of points of many coordinates: a tile of filtered squared distances from
// cuBLAS (S = A B^T of the shifted float32 coordinates, the filter F = |a|^2 + |b|^2 - 2 S), each
// query row's threshold, its candidates, and their exact recheck (gpu_core/_points/brute_gpu.py;
// the filter's error bound and why no true candidate is above the threshold: _points/filter.py).
//
// One warp per query row everywhere: lanes read a row's tile 32 columns at a time (coalesced) and
// keep its candidates in column order, so what a row gets is deterministic.
//
// Keys. The filtered key of row i and target column j is K = qn2[i] + tn2[j] - 2 S[i][j] in float64,
// under mutual reachability max(qcore[i], tcore[j], K); a target of the row's own component
// (qcomp[i] == tcomp[j]) is no candidate. The exact key is the contract's: sum_k (a_k - b_k)^2 in
// float64, dimension order, one rounding per operation (__dsub_rn/__dmul_rn/__dadd_rn, no FMA: the
// host's squared_distances), then the same max. Lists are ordered by (exact key, point id).

#define BRUTE_LANE_LIST 8   // per-lane smallest filtered keys in tile_threshold (LANE_LIST in brute_gpu.py)
#define BRUTE_MERGE 512     // the flush's sort size: a row's list (<= 256) and its buffer (<= 256)

__device__ __forceinline__ double brute_inf() { return __longlong_as_double(0x7FF0000000000000LL); }

__device__ __forceinline__ double filtered_key(const float* __restrict__ s_row, int col, double qn2,
                                               const double* __restrict__ tn2, double qcore,
                                               const double* __restrict__ tcore, int qcomp,
                                               const int* __restrict__ tcomp, int tile_start, bool* valid) {
    const int j = tile_start + col;
    *valid = !(tcomp && tcomp[j] == qcomp);
    double k = qn2 + tn2[j] - 2.0 * static_cast<double>(s_row[col]);
    if (tcore) k = fmax(fmax(qcore, tcore[j]), k);
    return k;
}

// Rows whose threshold is still +inf get one from this tile: the m-th smallest filtered key over
// the union of each lane's BRUTE_LANE_LIST smallest (a subset of the row's keys, so its m-th is at
// least the tile's m-th: an upper bound, which is what a threshold needs), plus twice the row's
// error bound. Fewer than m candidates: the threshold stays +inf.
extern "C" __global__ void tile_threshold(const float* __restrict__ s, int rows, int cols, long long ld,
                                          int tile_start, const double* __restrict__ qn2,
                                          const double* __restrict__ tn2, const double* __restrict__ qcore,
                                          const double* __restrict__ tcore, const int* __restrict__ qcomp,
                                          const int* __restrict__ tcomp, const double* __restrict__ margin,
                                          int m, double* __restrict__ theta) {
    const int lane = threadIdx.x & 31;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    for (int i = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < rows; i += warps) {
        if (!isinf(theta[i]) || m > 32 * BRUTE_LANE_LIST) continue;
        const float* s_row = s + static_cast<long long>(i) * ld;
        const double q2 = qn2[i];
        const double qc = qcore ? qcore[i] : 0.0;
        const int qg = qcomp ? qcomp[i] : 0;
        double best[BRUTE_LANE_LIST];
#pragma unroll
        for (int r = 0; r < BRUTE_LANE_LIST; ++r) best[r] = brute_inf();
        for (int col = lane; col < cols; col += 32) {
            bool valid;
            const double k = filtered_key(s_row, col, q2, tn2, qc, tcore, qg, tcomp, tile_start, &valid);
            if (!valid || !(k < best[BRUTE_LANE_LIST - 1])) continue;
#pragma unroll
            for (int r = BRUTE_LANE_LIST - 1; r > 0; --r) best[r] = fmax(best[r - 1], fmin(best[r], k));
            best[0] = fmin(best[0], k);
        }
        // the m-th smallest of the lanes' lists: m rounds of a warp minimum, the winner pops its head
        double kth = brute_inf();
        for (int round = 0; round < m; ++round) {
            double v = best[0];
            int who = lane;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) {
                const double ov = __shfl_xor_sync(0xFFFFFFFFu, v, off);
                const int ow = __shfl_xor_sync(0xFFFFFFFFu, who, off);
                if (ov < v || (ov == v && ow < who)) {
                    v = ov;
                    who = ow;
                }
            }
            kth = v;
            if (lane == who) {
#pragma unroll
                for (int r = 0; r < BRUTE_LANE_LIST - 1; ++r) best[r] = best[r + 1];
                best[BRUTE_LANE_LIST - 1] = brute_inf();
            }
        }
        if (lane == 0 && !isinf(kth)) theta[i] = fmin(theta[i], kth + 2.0 * margin[i]);
    }
}

// Each row's targets at most its threshold, appended (tile columns, in column order) to its buffer
// of `cap` entries from resume[i] on. A chunk of 32 columns that does not fit leaves resume[i] at
// its first column (the row is flushed and scanned again from there); a row done sets it to -1.
extern "C" __global__ void tile_candidates(const float* __restrict__ s, int rows, int cols, long long ld,
                                           int tile_start, const double* __restrict__ qn2,
                                           const double* __restrict__ tn2, const double* __restrict__ qcore,
                                           const double* __restrict__ tcore, const int* __restrict__ qcomp,
                                           const int* __restrict__ tcomp, const double* __restrict__ theta,
                                           int cap, int* __restrict__ buffer, int* __restrict__ count,
                                           int* __restrict__ resume, int* __restrict__ overflow) {
    const int lane = threadIdx.x & 31;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    for (int i = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < rows; i += warps) {
        const int from = resume[i];
        if (from < 0) continue;
        const float* s_row = s + static_cast<long long>(i) * ld;
        const double q2 = qn2[i];
        const double qc = qcore ? qcore[i] : 0.0;
        const int qg = qcomp ? qcomp[i] : 0;
        const double limit = theta[i];
        int filled = count[i];
        int stopped = -1;
        for (int chunk = from; chunk < cols; chunk += 32) {
            const int col = chunk + lane;
            bool pass = false;
            if (col < cols) {
                bool valid;
                const double k = filtered_key(s_row, col, q2, tn2, qc, tcore, qg, tcomp, tile_start, &valid);
                pass = valid && k <= limit;
            }
            const unsigned mask = __ballot_sync(0xFFFFFFFFu, pass);
            const int total = __popc(mask);
            if (filled + total > cap) {
                stopped = chunk;
                break;
            }
            if (pass) buffer[static_cast<long long>(i) * cap + filled + __popc(mask & ((1u << lane) - 1u))] = tile_start + col;
            filled += total;
        }
        if (lane == 0) {
            count[i] = filled;
            resume[i] = stopped;
            if (stopped >= 0) atomicExch(overflow, 1);
        }
    }
}

__device__ __forceinline__ bool entry_less(double ka, long long ia, double kb, long long ib) {
    return ka < kb || (ka == kb && ia < ib);
}

// Each row's buffered candidates (target positions) rechecked exactly and merged into its list of
// the m least (exact key, point id) so far; the threshold becomes min(itself, the m-th + margin)
// once the list is full. qx: the rows' float64 coordinates (row-major, d each); x: the points'
// (by point id); order: target position -> point id (null: the identity); core2: by point id.
extern "C" __global__ void flush_candidates(int rows, int d, const double* __restrict__ qx,
                                            const double* __restrict__ x, const long long* __restrict__ order,
                                            const double* __restrict__ qcore, const double* __restrict__ core2,
                                            int cap, const int* __restrict__ buffer, int* __restrict__ count,
                                            int m, long long* __restrict__ list_ids, double* __restrict__ list_keys,
                                            double* __restrict__ theta, const double* __restrict__ margin) {
    __shared__ double keys_s[4][BRUTE_MERGE];
    __shared__ long long ids_s[4][BRUTE_MERGE];
    const int lane = threadIdx.x & 31;
    const int slot = (threadIdx.x >> 5) & 3;  // blockDim.x == 128: four warps, one row each
    double* keys = keys_s[slot];
    long long* ids = ids_s[slot];
    const int warps = (gridDim.x * blockDim.x) >> 5;
    const long long none = 0x7FFFFFFFFFFFFFFFLL;
    for (int i = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < rows; i += warps) {
        const int c = count[i];
        int size = 1;
        while (size < m + c) size <<= 1;  // m + c <= BRUTE_MERGE (brute_gpu.py keeps m, cap <= 256)
        {
            const double* q = qx + static_cast<long long>(i) * d;
            for (int e = lane; e < size; e += 32) {
                if (e < m) {
                    keys[e] = list_keys[static_cast<long long>(i) * m + e];
                    ids[e] = list_ids[static_cast<long long>(i) * m + e];
                    if (ids[e] < 0) ids[e] = none;
                } else if (e < m + c) {
                    const int pos = buffer[static_cast<long long>(i) * cap + (e - m)];
                    const long long id = order ? order[pos] : static_cast<long long>(pos);
                    const double* p = x + id * d;
                    double acc = 0.0;
                    for (int k = 0; k < d; ++k) {
                        const double diff = __dsub_rn(q[k], p[k]);
                        acc = __dadd_rn(acc, __dmul_rn(diff, diff));
                    }
                    if (core2) acc = fmax(fmax(qcore[i], core2[id]), acc);
                    keys[e] = acc;
                    ids[e] = id;
                } else {
                    keys[e] = brute_inf();
                    ids[e] = none;
                }
            }
        }
        __syncwarp();
        // bitonic sort of `size` entries by (key, id), ascending
        for (int width = 2; width <= size; width <<= 1) {
            for (int stride = width >> 1; stride > 0; stride >>= 1) {
                for (int e = lane; e < size; e += 32) {
                    const int other = e ^ stride;
                    if (other > e) {
                        const bool up = (e & width) == 0;
                        const bool swap = up ? entry_less(keys[other], ids[other], keys[e], ids[e])
                                             : entry_less(keys[e], ids[e], keys[other], ids[other]);
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
        {
            for (int e = lane; e < m; e += 32) {
                list_keys[static_cast<long long>(i) * m + e] = keys[e];
                list_ids[static_cast<long long>(i) * m + e] = ids[e] == none ? -1 : ids[e];
            }
            if (lane == 0) {
                count[i] = 0;
                const double last = keys[m - 1];
                if (!isinf(last)) theta[i] = fmin(theta[i], last + margin[i]);
            }
        }
        __syncwarp();
    }
}
