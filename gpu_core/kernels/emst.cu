// Exact Euclidean (and mutual-reachability) minimum spanning trees of point sets: single-tree
// Borůvka over a bounding-volume hierarchy, after ArborX (shared/seeds/003: Prokopenko et al.).
//
// Index. Points are sorted by Morton code; leaf j of an implicit complete binary tree (heap
// numbering: root 1, children 2i and 2i+1, leaves P..2P-1) holds sorted points
// [j*kLeaf, (j+1)*kLeaf). Boxes are built bottom-up one level per launch.
//
// Exactness. Every squared distance is sum_k (a_k - b_k)^2 in dimension order with one rounding
// per operation (__dsub_rn/__dmul_rn/__dadd_rn: no contraction into FMA), as the NumPy backend
// computes it. The box distance uses the same operations, so by monotonicity of rounding it never
// exceeds the distance to a point inside the box: pruning with "bound < box distance" is safe.
// Candidates compare by (w2, min(i, j), max(i, j)) with i, j the ORIGINAL point ids.
//
// Metrics. The Euclidean build compares squared distances; the minkowski build (EMST_MINKOWSKI,
// gpu_core/_points/metrics.py) compares the key of the metric chosen at run time by `metric`: 1 the
// sum of |a_k - b_k| (manhattan), 2 their maximum (chebyshev), 3 the sum of pow(|a_k - b_k|, p)
// (minkowski; detmath.cuh's pow), each in dimension order, rounded once per operation. A box's key
// uses the same operations on the gaps, so it never exceeds a point's inside it (pow's last ulp
// aside: minkowski's box keys are lowered by 2^-30 first); everything else (lists, mutual
// reachability, the tie rule) is the same on keys as on squared distances.
//
// Neighbour lists: before the rounds, every point's EMST_LIST nearest points (a k-nearest search);
// in each round a point whose list holds a point of another component nearer than the list's last
// has its edge from the list and skips the tree search (most points in the early rounds).
//
// A Borůvka round: reset per-component state; seed each component's bound from Morton neighbours;
// each point searches its nearest point outside its component (skipping subtrees whose points all
// lie in its component), lowering the component's bound (atomicMin on the float64 bits: squared
// weights are >= 0, so their bits order as unsigned integers); the points whose best weight equals
// the component's bound offer their (min, max) pair (a second atomicMin), which gives the exact
// tie rule; components link along their chosen edges (atomicCAS, larger root under smaller).
//
// Design: docs/design/point-trees.md.

#define EMST_INF_BITS 0x7FF0000000000000ULL
#define EMST_NO_PAIR 0xFFFFFFFFFFFFFFFFULL

#ifndef EMST_LEAF
#define EMST_LEAF 1
#endif
constexpr int kLeaf = EMST_LEAF;  // points per leaf (EMST_LEAF in _backend/kernels.py)
constexpr int kMaxDims = 32;
constexpr int kStack = 64;  // > the tree's depth (at most 31 levels: 32-bit node numbers)
constexpr int kEmpty = -2;  // component id of a node without points (matches every component)
constexpr int kMixed = -1;  // component id of a node whose points lie in several components

__device__ __forceinline__ double sq_dist(const double* __restrict__ x, const double* __restrict__ y, int d) {
    double acc = 0.0;
    for (int k = 0; k < d; ++k) {
        const double diff = __dsub_rn(x[k], y[k]);
        acc = __dadd_rn(acc, __dmul_rn(diff, diff));
    }
    return acc;
}

__device__ __forceinline__ double box_dist(const double* __restrict__ x, const double* __restrict__ lo,
                                           const double* __restrict__ hi, int d) {
    double acc = 0.0;
    for (int k = 0; k < d; ++k) {
        double g = 0.0;
        const double below = __dsub_rn(lo[k], x[k]);
        const double above = __dsub_rn(x[k], hi[k]);
        if (below > g) g = below;
        if (above > g) g = above;
        acc = __dadd_rn(acc, __dmul_rn(g, g));
    }
    return acc;
}

#ifdef EMST_MINKOWSKI
#include "detmath.cuh"
constexpr double kLpBoxSlack = 1.0 - 9.313225746154785e-10;  // 1 - 2^-30 (metrics.LP_BOX_SLACK)

__device__ __forceinline__ double key_term(double acc, double gap, int metric, double p) {
    if (metric == 2) return fmax(acc, gap);
    if (metric == 3) return __dadd_rn(acc, detmath::pow(gap, p));
    return __dadd_rn(acc, gap);
}

__device__ __forceinline__ double pair_key(const double* __restrict__ x, const double* __restrict__ y, int d,
                                           int metric, double p) {
    double acc = 0.0;
    for (int k = 0; k < d; ++k) acc = key_term(acc, fabs(__dsub_rn(x[k], y[k])), metric, p);
    return acc;
}

__device__ __forceinline__ double box_key(const double* __restrict__ x, const double* __restrict__ lo,
                                          const double* __restrict__ hi, int d, int metric, double p) {
    double acc = 0.0;
    for (int k = 0; k < d; ++k) {
        double g = 0.0;
        const double below = __dsub_rn(lo[k], x[k]);
        const double above = __dsub_rn(x[k], hi[k]);
        if (below > g) g = below;
        if (above > g) g = above;
        acc = key_term(acc, g, metric, p);
    }
    return metric == 3 ? __dmul_rn(acc, kLpBoxSlack) : acc;
}
// packed boxes serve manhattan and chebyshev; minkowski's searches read the double boxes (packed: null)
#define EMST_PACKED(D, packed) ((D) >= 1 && (D) <= 3 && (packed) != nullptr)
#else
__device__ __forceinline__ double pair_key(const double* __restrict__ x, const double* __restrict__ y, int d, int,
                                           double) {
    return sq_dist(x, y, d);
}

__device__ __forceinline__ double box_key(const double* __restrict__ x, const double* __restrict__ lo,
                                          const double* __restrict__ hi, int d, int, double) {
    return box_dist(x, lo, hi, d);
}
#define EMST_PACKED(D, packed) ((D) >= 1 && (D) <= 3)
#endif

__device__ __forceinline__ unsigned long long dbits(double v) {
    return static_cast<unsigned long long>(__double_as_longlong(v));
}

__device__ __forceinline__ double bits_to_double(unsigned long long b) {
    return __longlong_as_double(static_cast<long long>(b));
}

// Packed boxes (1 to 3 dimensions, the fast path): one 32-byte record per node, so the two
// children a search looks at share one 64-byte segment instead of five scattered reads (two
// double boxes, their components). a = (lo[0..2] rounded down to float, the node's component),
// b = (hi[0..2] rounded up, its smallest squared core distance rounded down): a float box that
// contains the exact one.
struct __align__(32) PackedNode {
    float4 a;
    float4 b;
};

__device__ __forceinline__ PackedNode load_node(const PackedNode* __restrict__ nodes, int node) {
    const float4* p = reinterpret_cast<const float4*>(nodes + node);
    return PackedNode{__ldg(p), __ldg(p + 1)};
}

__device__ __forceinline__ int packed_comp(const PackedNode& node) { return __float_as_int(node.a.w); }

// A lower bound of box_dist (hence of the computed distance to any point in the node) in float:
// the query rounded outwards (xd <= x <= xu), every operation rounded down, and the sum scaled
// down by 2^-20 (relative), far more than the few double roundings by which box_dist (round to
// nearest, as sq_dist) may lie under the exact value. Pruning with it stays exact: a lower bound
// only ever searches more.
template <int D>
__device__ __forceinline__ double packed_lower(const PackedNode& node, const float* xd, const float* xu,
                                              int metric) {
    const float lo[3] = {node.a.x, node.a.y, node.a.z};
    const float hi[3] = {node.b.x, node.b.y, node.b.z};
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < D; ++k) {
        const float g = fmaxf(fmaxf(__fsub_rd(lo[k], xu[k]), __fsub_rd(xd[k], hi[k])), 0.0f);
#ifdef EMST_MINKOWSKI
        acc = metric == 2 ? fmaxf(acc, g) : __fadd_rd(acc, g);
#else
        acc = __fadd_rd(acc, __fmul_rd(g, g));
#endif
    }
    return static_cast<double>(__fmul_rd(acc, 0.99999905f));  // 1 - 2^-20, rounded down
}

// (the Euclidean build ignores `metric`)
template <int D>
__device__ __forceinline__ void outward(const double* x, float* xd, float* xu) {
#pragma unroll
    for (int k = 0; k < (D > 0 && D <= 3 ? D : 1); ++k) {
        xd[k] = __double2float_rd(x[k]);
        xu[k] = __double2float_ru(x[k]);
    }
}

// --- index -----------------------------------------------------------------------------------

// The Morton code of one point from its coordinates scaled to [0, 1] per dimension (clamped).
__device__ __forceinline__ unsigned long long morton_code(const double* __restrict__ x, int d,
                                                          const double* __restrict__ lo,
                                                          const double* __restrict__ scale, int bits) {
    unsigned long long code = 0;
    const unsigned long long top = (1ULL << bits) - 1ULL;
    unsigned long long q[kMaxDims];
    for (int k = 0; k < d; ++k) {
        double t = (x[k] - lo[k]) * scale[k];
        t = t < 0.0 ? 0.0 : (t > 1.0 ? 1.0 : t);
        q[k] = static_cast<unsigned long long>(t * static_cast<double>(top));
    }
    for (int b = bits - 1; b >= 0; --b)
        for (int k = 0; k < d; ++k) code = (code << 1) | ((q[k] >> b) & 1ULL);
    return code;
}

// Morton code of each point (the index's order; also query points', to sort them the same way).
extern "C" __global__ void morton_codes(const double* __restrict__ coords, int n, int d,
                                        const double* __restrict__ lo, const double* __restrict__ scale,
                                        int bits, unsigned long long* __restrict__ codes) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        codes[i] = morton_code(coords + static_cast<long long>(i) * d, d, lo, scale, bits);
}

// Leaf boxes (empty leaves get lo = +inf, hi = -inf) and the leaves' smallest squared core distance.
extern "C" __global__ void build_leaves(const double* __restrict__ pts, int n, int d, int num_leaves,
                                        const double* __restrict__ core2, double* __restrict__ lo,
                                        double* __restrict__ hi, double* __restrict__ min_core2) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < num_leaves; j += gridDim.x * blockDim.x) {
        const long long node = static_cast<long long>(num_leaves) + j;
        const int first = j * kLeaf;
        const int last = min(first + kLeaf, n);
        double mc = __longlong_as_double(static_cast<long long>(EMST_INF_BITS));
        for (int k = 0; k < d; ++k) {
            double a = __longlong_as_double(static_cast<long long>(EMST_INF_BITS));
            double b = -a;
            for (int p = first; p < last; ++p) {
                const double v = pts[static_cast<long long>(p) * d + k];
                a = fmin(a, v);
                b = fmax(b, v);
            }
            lo[node * d + k] = a;
            hi[node * d + k] = b;
        }
        for (int p = first; p < last; ++p) mc = fmin(mc, core2 ? core2[p] : 0.0);
        min_core2[node] = mc;
    }
}

// Internal nodes [level, 2*level) from their children.
extern "C" __global__ void build_level(int level, int d, double* __restrict__ lo, double* __restrict__ hi,
                                       double* __restrict__ min_core2) {
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < level; t += gridDim.x * blockDim.x) {
        const long long node = static_cast<long long>(level) + t;
        const long long l = 2 * node, r = 2 * node + 1;
        for (int k = 0; k < d; ++k) {
            lo[node * d + k] = fmin(lo[l * d + k], lo[r * d + k]);
            hi[node * d + k] = fmax(hi[l * d + k], hi[r * d + k]);
        }
        min_core2[node] = fmin(min_core2[l], min_core2[r]);
    }
}

// The packed copy of every node's box (d <= 3); components are filled in per round.
extern "C" __global__ void pack_nodes(int nodes, int d, const double* __restrict__ lo, const double* __restrict__ hi,
                                      const double* __restrict__ min_core2, PackedNode* __restrict__ packed) {
    for (int node = blockIdx.x * blockDim.x + threadIdx.x; node < nodes; node += gridDim.x * blockDim.x) {
        float l[3] = {0.0f, 0.0f, 0.0f}, h[3] = {0.0f, 0.0f, 0.0f};
        for (int k = 0; k < d; ++k) {
            l[k] = __double2float_rd(lo[static_cast<long long>(node) * d + k]);
            h[k] = __double2float_ru(hi[static_cast<long long>(node) * d + k]);
        }
        packed[node].a = make_float4(l[0], l[1], l[2], __int_as_float(kEmpty));
        packed[node].b = make_float4(h[0], h[1], h[2], __double2float_rd(min_core2[node]));
    }
}

__device__ __forceinline__ int combine(int a, int b) {
    if (a == kEmpty) return b;
    if (b == kEmpty) return a;
    return a == b ? a : kMixed;
}

// Each node's component (kMixed, kEmpty); also into the packed copy when there is one.
extern "C" __global__ void leaf_components(const int* __restrict__ comp, int n, int num_leaves,
                                           int* __restrict__ node_comp, PackedNode* __restrict__ packed) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < num_leaves; j += gridDim.x * blockDim.x) {
        int c = kEmpty;
        const int last = min(j * kLeaf + kLeaf, n);
        for (int p = j * kLeaf; p < last; ++p) c = combine(c, comp[p]);
        node_comp[num_leaves + j] = c;
        if (packed) packed[num_leaves + j].a.w = __int_as_float(c);
    }
}

extern "C" __global__ void level_components(int level, int* __restrict__ node_comp, PackedNode* __restrict__ packed) {
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < level; t += gridDim.x * blockDim.x) {
        const int node = level + t;
        const int c = combine(node_comp[2 * node], node_comp[2 * node + 1]);
        node_comp[node] = c;
        if (packed) packed[node].a.w = __int_as_float(c);
    }
}

// --- core distances: k-th smallest squared distance, the point itself counted ----------------

// Traversal order (both searches): at an internal node both children's lower bounds are computed
// once; the search descends into the nearer one that may still hold a better point and keeps the
// other on a stack with its bound, which is checked again when popped (the limit only shrinks).
// The stack holds at most one node per level, and bounds are stored rounded down to float
// (__double2float_rd), so a stored bound never exceeds the exact one and pruning stays safe.

// IDS: instead of core2, each point's list of its k = KMAX nearest (sorted positions and squared
// distances, ascending; -1 and +inf past the set's size; core2 unused, may be null), which the
// rounds read (neighbour_edges) and which holds every core distance up to KMAX.
// queries (with IDS): the lists of num_queries other points (row-major, d coordinates each: HDBSCAN*'s
// prediction of new points), not of the index's own; null for the index's own points. With
// code_lo/code_scale/bits (the index's Morton frame; null/0: none), a query's first bound is that of
// the points around where its Morton code falls in the index's order (a binary search over the
// codes of the sorted points, computed as the index computed them); without, it starts with none.
template <int D, int KMAX, bool IDS>
__global__ void core_distances(const double* __restrict__ pts, int n, int dims, int num_leaves,
                               const double* __restrict__ lo, const double* __restrict__ hi,
                               const PackedNode* __restrict__ packed, int k, double* __restrict__ core2,
                               int* __restrict__ list_pos, double* __restrict__ list_w2,
                               const double* __restrict__ queries, int num_queries,
                               const double* __restrict__ code_lo, const double* __restrict__ code_scale,
                               int bits, int metric, double mp) {
    const int d = D > 0 ? D : dims;
    const bool kPacked = EMST_PACKED(D, packed);
    const double* __restrict__ source = queries ? queries : pts;
    const int count = queries ? num_queries : n;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        double x[D > 0 ? D : kMaxDims];
        for (int q = 0; q < d; ++q) x[q] = source[static_cast<long long>(i) * d + q];
        float xd[3], xu[3];
        if (kPacked) outward<D>(x, xd, xu);
        double best[KMAX];  // ascending; best[k-1] is the current k-th smallest
        int ids[IDS ? KMAX : 1];  // with IDS: the positions of best[]
        const double inf = __longlong_as_double(static_cast<long long>(EMST_INF_BITS));
#pragma unroll
        for (int q = 0; q < KMAX; ++q) best[q] = inf;
#pragma unroll
        for (int q = 0; q < (IDS ? KMAX : 1); ++q) ids[q] = -1;
        double kth = inf;  // best[k - 1], kept apart: a variable index would put the list in local memory
        // insert into the sorted list, dropping its last: b[q] = max(a[q-1], min(a[q], w)); unrolled
        // with constant indices, so the list lives in registers
        auto insert = [&](double w, int p) {
            if (w < kth) {
                if constexpr (IDS) {  // the same network, moving each position with its distance
#pragma unroll
                    for (int q = KMAX - 1; q > 0; --q) {
                        if (w < best[q - 1]) {
                            best[q] = best[q - 1];
                            ids[q] = ids[q - 1];
                        } else if (w < best[q]) {
                            best[q] = w;
                            ids[q] = p;
                        }
                    }
                    if (w < best[0]) {
                        best[0] = w;
                        ids[0] = p;
                    }
                    kth = best[KMAX - 1];
                } else {
#pragma unroll
                    for (int q = KMAX - 1; q > 0; --q)
                        if (q < k) best[q] = fmax(best[q - 1], fmin(best[q], w));
                    best[0] = fmin(best[0], w);
#pragma unroll
                    for (int q = 0; q < KMAX; ++q)
                        if (q == k - 1) kth = best[q];
                }
            }
        };
        // A first bound: the k-th smallest distance to the (up to) 2k + 1 points around i in Morton
        // order, i itself included. They are real points, so it is at least the true k-th distance
        // T; a box is then searched while its bound is at most min(list's k-th, this bound) (`<=`:
        // every point at distance <= T is still visited, so the list ends at T exactly).
        if (!queries || code_lo) {
            int at = i;  // the query's place among the index's points in Morton order
            if (queries) {
                const unsigned long long code = morton_code(x, d, code_lo, code_scale, bits);
                int first = 0, last = n;
                while (first < last) {
                    const int mid = first + (last - first) / 2;
                    if (morton_code(pts + static_cast<long long>(mid) * d, d, code_lo, code_scale, bits) < code)
                        first = mid + 1;
                    else
                        last = mid;
                }
                at = first;
            }
            const int span = min(n, 2 * k + 1);
            const int first_near = max(0, min(at - k, n - span));
            for (int p = first_near; p < first_near + span; ++p) insert(pair_key(x, pts + static_cast<long long>(p) * d, d, metric, mp), p);
        }
        const double near_bound = kth;  // +inf for a query
#pragma unroll
        for (int q = 0; q < KMAX; ++q) best[q] = inf;
#pragma unroll
        for (int q = 0; q < (IDS ? KMAX : 1); ++q) ids[q] = -1;
        kth = inf;
        int stack[kStack];
        float stack_lb[kStack];
        int top = 0;
        int node = 1;
        while (node != 0) {
            if (node >= num_leaves) {
                const int first = (node - num_leaves) * kLeaf;
                const int last = min(first + kLeaf, n);
                for (int p = first; p < last; ++p) insert(pair_key(x, pts + static_cast<long long>(p) * d, d, metric, mp), p);
                node = 0;
            } else {
                // a box whose bound is past min(the current k-th, the first bound) cannot lower it
                const double limit = fmin(kth, near_bound);
                const int l = 2 * node, r = l + 1;
                double dl, dr;
                if (kPacked) {
                    dl = packed_lower<D>(load_node(packed, l), xd, xu, metric);
                    dr = packed_lower<D>(load_node(packed, r), xd, xu, metric);
                } else {
                    dl = box_key(x, lo + static_cast<long long>(l) * d, hi + static_cast<long long>(l) * d, d, metric, mp);
                    dr = box_key(x, lo + static_cast<long long>(r) * d, hi + static_cast<long long>(r) * d, d, metric, mp);
                }
                const bool gl = dl <= limit, gr = dr <= limit;
                if (gl && gr) {
                    const bool left = dl <= dr;
                    stack[top] = left ? r : l;
                    stack_lb[top] = __double2float_rd(left ? dr : dl);
                    ++top;
                    node = left ? l : r;
                } else {
                    node = gl ? l : (gr ? r : 0);
                }
            }
            while (node == 0 && top > 0) {
                --top;
                if (static_cast<double>(stack_lb[top]) <= fmin(kth, near_bound)) node = stack[top];
            }
        }
        if constexpr (!IDS) {
            core2[i] = kth;
        } else {
#pragma unroll
            for (int q = 0; q < KMAX; ++q) {
                list_pos[static_cast<long long>(i) * KMAX + q] = ids[q];
                list_w2[static_cast<long long>(i) * KMAX + q] = best[q];
            }
        }
    }
}

// --- Borůvka rounds ------------------------------------------------------------------------------

extern "C" __global__ void reset_round(int n, unsigned long long* __restrict__ bound,
                                       unsigned long long* __restrict__ pair) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        bound[i] = EMST_INF_BITS;
        pair[i] = EMST_NO_PAIR;
    }
}

__device__ __forceinline__ double weight2(const double* __restrict__ pts, const double* __restrict__ core2,
                                          int i, int j, int d, int metric, double p) {
    double w = pair_key(pts + static_cast<long long>(i) * d, pts + static_cast<long long>(j) * d, d, metric, p);
    if (core2) w = fmax(w, fmax(core2[i], core2[j]));
    return w;
}

// A cheap first bound for every component: the sorted neighbours (close in Morton order).
extern "C" __global__ void seed_bounds(const double* __restrict__ pts, const double* __restrict__ core2,
                                       const int* __restrict__ comp, int n, int d,
                                       unsigned long long* __restrict__ bound, int metric, double p) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i + 1 < n; i += gridDim.x * blockDim.x) {
        if (comp[i] == comp[i + 1]) continue;
        const unsigned long long w = dbits(weight2(pts, core2, i, i + 1, d, metric, p));
        atomicMin(&bound[comp[i]], w);
        atomicMin(&bound[comp[i + 1]], w);
    }
}

__device__ __forceinline__ bool key_less(double w, unsigned long long pair, double bw, unsigned long long bpair) {
    return w < bw || (w == bw && pair < bpair);
}

// Neighbour lists: every point's K nearest, sorted, from core_distances<D, K, true>. All points
// nearer than the K-th are in the list, and an edge weighs at least its squared distance (a
// mutual-reachability weight too), so the lightest listed edge to another component is the point's
// exact lightest edge out when it weighs less than the K-th distance (ties included: an equal
// weight is also nearer than the K-th); the point is then `resolved` and skips the tree search.
// Otherwise no edge out weighs less than the K-th, which raises its lower bound.
template <int K, bool MR>
__global__ void neighbour_edges(int n, const double* __restrict__ core2, const int* __restrict__ comp,
                                const int* __restrict__ orig,
                                const int* __restrict__ list_pos, const double* __restrict__ list_w2,
                                unsigned long long* __restrict__ bound, double* __restrict__ best_w,
                                unsigned long long* __restrict__ best_pair, double* __restrict__ lower,
                                unsigned char* __restrict__ resolved) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int c = comp[i];
        const double lb = lower[i];
        resolved[i] = 0;
        if (lb > bits_to_double(bound[c])) continue;  // the tree search skips it as well
        const long long row = static_cast<long long>(i) * K;
        const unsigned long long oi = static_cast<unsigned long long>(orig[i]);
        double bw = __longlong_as_double(static_cast<long long>(EMST_INF_BITS));
        unsigned long long bp = EMST_NO_PAIR;
#pragma unroll
        for (int q = 0; q < K; ++q) {
            const int p = list_pos[row + q];
            double w = list_w2[row + q];
            if (p < 0 || w > bw) break;  // ascending distances, weights at least them: nothing further wins
            if (comp[p] == c) continue;
            if (MR) w = fmax(w, fmax(core2[i], core2[p]));
            const unsigned long long op = static_cast<unsigned long long>(orig[p]);
            const unsigned long long pair = oi < op ? (oi << 32) | op : (op << 32) | oi;
            if (key_less(w, pair, bw, bp)) {
                bw = w;
                bp = pair;
            }
        }
        const double kth = list_w2[row + K - 1];
        if (bw < kth) {
            best_w[i] = bw;
            best_pair[i] = bp;
            atomicMin(&bound[c], dbits(bw));
            lower[i] = fmax(lb, bw);
            resolved[i] = 1;
        } else {
            lower[i] = fmax(lb, kth);
        }
    }
}

// Each point's lightest edge to another component (exact key), lowering its component's bound.
// Nodes whose points all lie in the query's component, and nodes without points, are skipped;
// a node is searched while its lower bound is at most min(own best, component bound): equal
// bounds are searched, since an equal weight with a smaller pair wins the tie.
template <int D, bool MR>
__global__ void nearest_outside(const double* __restrict__ pts, const double* __restrict__ core2, int n, int dims,
                                int num_leaves, const double* __restrict__ lo, const double* __restrict__ hi,
                                const double* __restrict__ min_core2, const int* __restrict__ node_comp,
                                const PackedNode* __restrict__ packed, const int* __restrict__ comp,
                                const int* __restrict__ orig, unsigned long long* __restrict__ bound,
                                double* __restrict__ best_w, unsigned long long* __restrict__ best_pair,
                                double* __restrict__ lower, const unsigned char* __restrict__ resolved,
                                int metric, double mp) {
    const int d = D > 0 ? D : dims;
    const bool kPacked = EMST_PACKED(D, packed);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        if (resolved && resolved[i]) continue;  // neighbour_edges found its edge
        // lower[i]: no edge from i leaves its component lighter than this (from earlier rounds; a
        // component only grows, so it stays true). A point that cannot beat its component's bound
        // has nothing to search.
        const int c = comp[i];
        const double lb = lower[i];
        if (lb > bits_to_double(*(volatile unsigned long long*)&bound[c])) {
            best_w[i] = __longlong_as_double(static_cast<long long>(EMST_INF_BITS));
            best_pair[i] = EMST_NO_PAIR;
            continue;
        }
        double x[D > 0 ? D : kMaxDims];
        for (int q = 0; q < d; ++q) x[q] = pts[static_cast<long long>(i) * d + q];
        float xd[3], xu[3];
        if (kPacked) outward<D>(x, xd, xu);
        const unsigned long long oi = static_cast<unsigned long long>(orig[i]);
        const double ci = MR ? core2[i] : 0.0;
        double bw = __longlong_as_double(static_cast<long long>(EMST_INF_BITS));
        unsigned long long bp = EMST_NO_PAIR;
        // the points of a leaf (of another component: kLeaf == 1 has it from the leaf's record)
        auto visit_leaf = [&](int leaf) {
            const int first = (leaf - num_leaves) * kLeaf;
            const int last = min(first + kLeaf, n);
            for (int p = first; p < last; ++p) {
                if (kLeaf > 1 && comp[p] == c) continue;
                double w = pair_key(x, pts + static_cast<long long>(p) * d, d, metric, mp);
                if (MR) w = fmax(w, fmax(ci, core2[p]));
                if (w > bw) continue;
                const unsigned long long op = static_cast<unsigned long long>(orig[p]);
                const unsigned long long pair = oi < op ? (oi << 32) | op : (op << 32) | oi;
                if (key_less(w, pair, bw, bp)) {
                    if (w < bw) atomicMin(&bound[c], dbits(w));
                    bw = w;
                    bp = pair;
                }
            }
        };
        int stack[kStack];
        float stack_lb[kStack];
        int top = 0;
        const int root_comp = node_comp[1];
        int node = (root_comp == c || root_comp == kEmpty) ? 0 : 1;
        while (node != 0) {
            if (node >= num_leaves) {
                visit_leaf(node);
                node = 0;
            } else {
                const int l = 2 * node, r = l + 1;
                const double limit = fmin(bw, bits_to_double(*(volatile unsigned long long*)&bound[c]));
                if (lb > limit) break;  // every edge left to see weighs at least lb: none can win
                PackedNode pl, pr;
                if (kPacked) {
                    pl = load_node(packed, l);
                    pr = load_node(packed, r);
                }
                const int cl = kPacked ? packed_comp(pl) : node_comp[l];
                const int cr = kPacked ? packed_comp(pr) : node_comp[r];
                bool gl = cl != c && cl != kEmpty, gr = cr != c && cr != kEmpty;
                double dl = 0.0, dr = 0.0;
                if (gl) {
                    if (kPacked) {
                        dl = packed_lower<D>(pl, xd, xu, metric);
                        if (MR) dl = fmax(dl, fmax(ci, static_cast<double>(pl.b.w)));
                    } else {
                        dl = box_key(x, lo + static_cast<long long>(l) * d, hi + static_cast<long long>(l) * d, d, metric, mp);
                        if (MR) dl = fmax(dl, fmax(ci, min_core2[l]));
                    }
                    gl = dl <= limit;
                }
                if (gr) {
                    if (kPacked) {
                        dr = packed_lower<D>(pr, xd, xu, metric);
                        if (MR) dr = fmax(dr, fmax(ci, static_cast<double>(pr.b.w)));
                    } else {
                        dr = box_key(x, lo + static_cast<long long>(r) * d, hi + static_cast<long long>(r) * d, d, metric, mp);
                        if (MR) dr = fmax(dr, fmax(ci, min_core2[r]));
                    }
                    gr = dr <= limit;
                }
                if (gl && gr) {
                    const bool left = dl <= dr;
                    stack[top] = left ? r : l;
                    stack_lb[top] = __double2float_rd(left ? dr : dl);
                    ++top;
                    node = left ? l : r;
                } else {
                    node = gl ? l : (gr ? r : 0);
                }
            }
            while (node == 0 && top > 0) {
                --top;
                const double limit = fmin(bw, bits_to_double(*(volatile unsigned long long*)&bound[c]));
                if (static_cast<double>(stack_lb[top]) <= limit) node = stack[top];
            }
        }
        best_w[i] = bw;
        best_pair[i] = bp;
        // what was not seen weighs more than the limit when it was skipped, which never fell
        // below min(bw, the component's bound now); what was seen weighs at least bw
        lower[i] = fmax(lb, fmin(bw, bits_to_double(*(volatile unsigned long long*)&bound[c])));
    }
}

// The points whose best weight is their component's minimum offer their pair: the smallest wins.
extern "C" __global__ void offer_pairs(int n, const int* __restrict__ comp, const double* __restrict__ best_w,
                                       const unsigned long long* __restrict__ best_pair,
                                       const unsigned long long* __restrict__ bound,
                                       unsigned long long* __restrict__ pair) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int c = comp[i];
        if (best_pair[i] != EMST_NO_PAIR && dbits(best_w[i]) == bound[c]) atomicMin(&pair[c], best_pair[i]);
    }
}

__device__ int find_root(const int* parent, int x) {
    int next = parent[x];
    while (next != x) {
        x = next;
        next = parent[x];
    }
    return x;
}

__device__ void unite(int* parent, int a, int b) {
    while (true) {
        a = find_root(parent, a);
        b = find_root(parent, b);
        if (a == b) return;
        if (a > b) {
            const int t = a;
            a = b;
            b = t;
        }
        if (atomicCAS(&parent[b], b, a) == b) return;  // the larger root goes under the smaller
    }
}

// Every component root records its chosen edge (once per edge) and links along it.
extern "C" __global__ void link_components(int n, const int* __restrict__ comp, const int* __restrict__ pos,
                                           const unsigned long long* __restrict__ bound,
                                           const unsigned long long* __restrict__ pair, int* parent,
                                           int* __restrict__ num_edges, long long* __restrict__ edges,
                                           double* __restrict__ edge_w2) {
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += gridDim.x * blockDim.x) {
        if (comp[r] != r || pair[r] == EMST_NO_PAIR) continue;
        const unsigned long long p = pair[r];
        const int a = pos[static_cast<int>(p >> 32)];
        const int b = pos[static_cast<int>(p & 0xFFFFFFFFULL)];
        const int other = comp[a] == r ? comp[b] : comp[a];
        if (pair[other] == p && other < r) continue;  // both chose it: the smaller root records it
        const int slot = atomicAdd(num_edges, 1);
        edges[slot] = static_cast<long long>(p);
        edge_w2[slot] = bits_to_double(bound[r]);
        unite(parent, a, b);
    }
}

// After linking: every point's component is its root (the parent links are shortened to it);
// count the roots. Other threads may read a link before or after it is shortened: both lead to
// the same root, as no link changes during this kernel otherwise.
extern "C" __global__ void compress(int n, int* parent, int* __restrict__ comp, int* __restrict__ num_roots) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int root = find_root(parent, i);
        parent[i] = root;
        comp[i] = root;
        if (root == i) atomicAdd(num_roots, 1);
    }
}

// Explicit instantiations, so nvcc compile checks cover the templates too (NVRTC picks them by name).
#ifndef EMST_LIST
#define EMST_LIST 8
#endif
#define EMST_INSTANTIATE_CORE(D, K, IDS)                                                                 \
    template __global__ void core_distances<D, K, IDS>(const double*, int, int, int, const double*,      \
                                                       const double*, const PackedNode*, int, double*,  \
                                                       int*, double*, const double*, int, const double*, \
                                                       const double*, int, int, double);
#define EMST_INSTANTIATE(D)                                                                              \
    template __global__ void nearest_outside<D, false>(                                                  \
        const double*, const double*, int, int, int, const double*, const double*, const double*,       \
        const int*, const PackedNode*, const int*, const int*, unsigned long long*, double*,             \
        unsigned long long*, double*, const unsigned char*, int, double);                                \
    template __global__ void nearest_outside<D, true>(                                                   \
        const double*, const double*, int, int, int, const double*, const double*, const double*,       \
        const int*, const PackedNode*, const int*, const int*, unsigned long long*, double*,             \
        unsigned long long*, double*, const unsigned char*, int, double);                                \
    EMST_INSTANTIATE_CORE(D, 8, false)                                                                   \
    EMST_INSTANTIATE_CORE(D, 16, false)                                                                  \
    EMST_INSTANTIATE_CORE(D, 32, false)                                                                  \
    EMST_INSTANTIATE_CORE(D, 64, false)                                                                  \
    EMST_INSTANTIATE_CORE(D, EMST_LIST, true)                                                            \
    EMST_INSTANTIATE_QUERY_LISTS(D)
// The lists of 8, 16, 32 and 64 neighbours (query points' included), less the one above.
#if EMST_LIST != 8
#define EMST_QUERY_8(D) EMST_INSTANTIATE_CORE(D, 8, true)
#else
#define EMST_QUERY_8(D)
#endif
#if EMST_LIST != 16
#define EMST_QUERY_16(D) EMST_INSTANTIATE_CORE(D, 16, true)
#else
#define EMST_QUERY_16(D)
#endif
#if EMST_LIST != 32
#define EMST_QUERY_32(D) EMST_INSTANTIATE_CORE(D, 32, true)
#else
#define EMST_QUERY_32(D)
#endif
#if EMST_LIST != 64
#define EMST_QUERY_64(D) EMST_INSTANTIATE_CORE(D, 64, true)
#else
#define EMST_QUERY_64(D)
#endif
#define EMST_INSTANTIATE_QUERY_LISTS(D) EMST_QUERY_8(D) EMST_QUERY_16(D) EMST_QUERY_32(D) EMST_QUERY_64(D)
template __global__ void neighbour_edges<EMST_LIST, false>(int, const double*, const int*, const int*, const int*,
                                                           const double*, unsigned long long*, double*,
                                                           unsigned long long*, double*, unsigned char*);
template __global__ void neighbour_edges<EMST_LIST, true>(int, const double*, const int*, const int*, const int*,
                                                          const double*, unsigned long long*, double*,
                                                          unsigned long long*, double*, unsigned char*);
EMST_INSTANTIATE(0)
EMST_INSTANTIATE(1)
EMST_INSTANTIATE(2)
EMST_INSTANTIATE(3)
