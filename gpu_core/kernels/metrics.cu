// The metrics' device arithmetic (gpu_core/_points/metrics.py states it): the search coordinates of
// cosine (unit rows) and haversine (unit vectors of latitude and longitude), the map from keys to
// distances, and exact Minkowski keys in tiles (the brute-force path of manhattan, chebyshev and
// minkowski). Every operation is the host's, in its order, rounded once (no FMA), so the GPU and the
// CPU backend compute the same bits.
#include "detmath.cuh"

#define MET_ADD(a, b) __dadd_rn((a), (b))
#define MET_SUB(a, b) __dsub_rn((a), (b))
#define MET_MUL(a, b) __dmul_rn((a), (b))

// x / |x| per row, |x| = sqrt(sum x_k^2) in dimension order; norm2 keeps sum x_k^2 (0: a zero row).
extern "C" __global__ void unit_rows(const double* __restrict__ x, long long n, int d, double* __restrict__ norm2,
                                     double* __restrict__ out) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const double* row = x + i * d;
        double acc = 0.0;
        for (int k = 0; k < d; ++k) acc = MET_ADD(acc, MET_MUL(row[k], row[k]));
        norm2[i] = acc;
        const double norm = __dsqrt_rn(acc);
        for (int k = 0; k < d; ++k) out[i * d + k] = __ddiv_rn(row[k], norm);
    }
}

// (cos lat cos lon, cos lat sin lon, sin lat) of (latitude, longitude) rows.
extern "C" __global__ void unit_vectors(const double* __restrict__ x, long long n, double* __restrict__ out) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        double s_lat, c_lat, s_lon, c_lon;
        detmath::sin_cos(x[2 * i], &s_lat, &c_lat);
        detmath::sin_cos(x[2 * i + 1], &s_lon, &c_lon);
        out[3 * i] = MET_MUL(c_lat, c_lon);
        out[3 * i + 1] = MET_MUL(c_lat, s_lon);
        out[3 * i + 2] = s_lat;
    }
}

// Distances of keys (metrics.MAP_*): 0 sqrt, 1 half, 2 haversine, 3 identity, 4 pow(key, 1/p); then / alpha.
extern "C" __global__ void key_distances(const double* __restrict__ keys, long long n, int map, double inverse_p,
                                         double alpha, double* __restrict__ out) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const double key = keys[i];
        double v;
        if (map == 0) {
            v = __dsqrt_rn(key);
        } else if (map == 1) {
            v = MET_MUL(key, 0.5);
        } else if (map == 2) {
            v = MET_MUL(2.0, detmath::asin(fmin(MET_MUL(0.5, __dsqrt_rn(key)), 1.0)));
        } else if (map == 4) {
            v = detmath::pow(key, inverse_p);
        } else {
            v = key;
        }
        out[i] = alpha == 1.0 ? v : __ddiv_rn(v, alpha);
    }
}

// pow(x, p) of every element (x >= 0).
extern "C" __global__ void pow_elements(const double* __restrict__ x, long long n, double p,
                                        double* __restrict__ out) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        out[i] = detmath::pow(x[i], p);
}

// Minkowski keys (kind 1: sum |a - b|, 2: max |a - b|, 3: sum pow(|a - b|, p)) of every query row
// against every target row, in dimension order: out[i * num_targets + j]. Blocks of 16 x 16 pairs read
// their rows' coordinates through shared memory, 16 coordinates at a time, in order.
constexpr int kTile = 16;
extern "C" __global__ void minkowski_tile(const double* __restrict__ queries, int num_queries,
                                          const double* __restrict__ targets, int num_targets, int d, int kind,
                                          double p, double* __restrict__ out) {
    __shared__ double qs[kTile][kTile + 1];
    __shared__ double ts[kTile][kTile + 1];
    const int i = blockIdx.y * kTile + threadIdx.y;
    const int j = blockIdx.x * kTile + threadIdx.x;
    double acc = 0.0;
    for (int k0 = 0; k0 < d; k0 += kTile) {
        const int qi = blockIdx.y * kTile + threadIdx.y, qk = k0 + threadIdx.x;
        qs[threadIdx.y][threadIdx.x] = (qi < num_queries && qk < d) ? queries[static_cast<long long>(qi) * d + qk] : 0.0;
        const int tj = blockIdx.x * kTile + threadIdx.y;
        ts[threadIdx.y][threadIdx.x] = (tj < num_targets && qk < d) ? targets[static_cast<long long>(tj) * d + qk] : 0.0;
        __syncthreads();
        const int last = min(kTile, d - k0);
        for (int k = 0; k < last; ++k) {
            const double diff = fabs(MET_SUB(qs[threadIdx.y][k], ts[threadIdx.x][k]));
            if (kind == 2) {
                acc = fmax(acc, diff);
            } else if (kind == 3) {
                acc = MET_ADD(acc, detmath::pow(diff, p));
            } else {
                acc = MET_ADD(acc, diff);
            }
        }
        __syncthreads();
    }
    if (i < num_queries && j < num_targets) out[static_cast<long long>(i) * num_targets + j] = acc;
}
