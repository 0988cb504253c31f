// Single-linkage dendrograms (SciPy linkage matrices) of spanning trees whose n - 1 edges are
// sorted in merge order, on the device (driver: gpu_core/_dendrogram/gpu.py; the same steps in
// Python, run by the CPU tests: tests.utils.dendrogram, which also compiles this file for the host).
//
// A component is named by its smallest vertex, its "rep". Edge i joins the components of T_{<i}
// (the forest of the edges before i) that hold its endpoints.
//
// 1. Reps by divide and conquer over the ranks, every block of a level at once. Level s (a power
//    of two) cuts the ranks into blocks [a, a + s) with mid = a + s/2; on entry eu[i], ev[i] are
//    reps of T_{<a}. The lower half's edges unite their endpoints (unite_lower); the upper half's
//    endpoints become their roots (find_upper): reps of T_{<mid}, the start of their next block.
//    Every block of every level unites in ONE per-vertex word (stamp << 32 | parent), stamp =
//    S/s + a/s (heap numbering: unique per level and block, never 0), so nothing is reset: a find
//    in block A follows a link only if it carries A's stamp. Sound because a vertex that block A
//    links is no longer the smallest of its T_{<mid_A} component, hence no rep of any later
//    block, and no earlier block ever linked it either: no two blocks of a level link one vertex,
//    and a link of block B that A meets (on a vertex that is a root for A) is not A's.
//    The union-find links the larger root under the smaller, so a root is its set's smallest rep.
//    Blocks of `tail` edges are finished by one thread each, sequentially (finish_blocks).
// 2. Children. winner = min(eu, ev), loser = max. In the edges sorted (stably) by winner, the
//    winner-side child of an edge is the previous edge of its group (or the point), the loser-side
//    child the last edge of the loser's group (or the point): the last merge of a component is
//    the last edge its rep won.
// 3. Sizes. The losers hang under their winners: a tree of the vertices rooted at 0, a vertex's
//    children in its group's order. Its Euler tour (token 2x enters x, 2x + 1 leaves it) ranked
//    by a ruling set (splitters walk to the next splitter; the splitters' list is ranked by
//    pointer jumping) gives size(edge) = 1 + (pos(leave loser) - pos(enter winner)) / 2.
//
// Vertex ids, ranks and tour tokens are int (the driver allows n < 2^30).
//
// Design: docs/design/dendrogram.md.

typedef unsigned long long u64;

__device__ __forceinline__ int dmin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int dmax(int a, int b) { return a < b ? b : a; }

__device__ __forceinline__ u64 load_word(const u64* word, int x) {
    return *reinterpret_cast<const volatile u64*>(word + x);
}

__device__ __forceinline__ u64 make_word(unsigned stamp, int parent) {
    return (static_cast<u64>(stamp) << 32) | static_cast<unsigned>(parent);
}

// The root of x in the union-find of `stamp` (path halving; every pointer it writes skips to an
// ancestor of the same stamp, so concurrent finds and unions stay correct).
__device__ __forceinline__ int find_root(u64* word, int x, unsigned stamp) {
    while (true) {
        const u64 wx = load_word(word, x);
        if (static_cast<unsigned>(wx >> 32) != stamp) return x;
        const int p = static_cast<int>(static_cast<unsigned>(wx));
        const u64 wp = load_word(word, p);
        if (static_cast<unsigned>(wp >> 32) != stamp) return p;
        const int g = static_cast<int>(static_cast<unsigned>(wp));
        word[x] = make_word(stamp, g);
        x = g;
    }
}

// Lock-free union (ECL-CC style): the larger root goes under the smaller one by atomicCAS.
__device__ __forceinline__ void unite(u64* word, int a, int b, unsigned stamp) {
    int ra = find_root(word, a, stamp);
    int rb = find_root(word, b, stamp);
    while (ra != rb) {
        const int lo = dmin(ra, rb);
        const int hi = dmax(ra, rb);
        const u64 seen = load_word(word, hi);
        if (static_cast<unsigned>(seen >> 32) != stamp &&
            atomicCAS(word + hi, seen, make_word(stamp, lo)) == seen) {
            return;
        }
        ra = find_root(word, hi, stamp);  // hi was linked meanwhile: go on from the roots
        rb = find_root(word, lo, stamp);
    }
}

// Level with blocks of 2 * half edges (half = 1 << log_half), stamp base S / s: the lower half
// of every block unites its endpoints.
extern "C" __global__ void unite_lower(int m, int log_half, unsigned base, const int* __restrict__ eu,
                                       const int* __restrict__ ev, u64* __restrict__ word) {
    const long long half = 1LL << log_half;
    const long long stride = static_cast<long long>(blockDim.x) * gridDim.x;
    const long long blocks = (m + 2 * half - 1) / (2 * half);
    for (long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks * half;
         j += stride) {
        const long long block = j >> log_half;
        const long long i = (block << (log_half + 1)) | (j & (half - 1));
        if (i >= m) continue;
        unite(word, eu[i], ev[i], base + static_cast<unsigned>(block));
    }
}

// The same level: the upper half's endpoints become the roots of their block's union-find.
extern "C" __global__ void find_upper(int m, int log_half, unsigned base, int* __restrict__ eu,
                                      int* __restrict__ ev, u64* __restrict__ word) {
    const long long half = 1LL << log_half;
    const long long stride = static_cast<long long>(blockDim.x) * gridDim.x;
    const long long blocks = (m + 2 * half - 1) / (2 * half);
    for (long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks * half;
         j += stride) {
        const long long block = j >> log_half;
        const long long i = (block << (log_half + 1)) | half | (j & (half - 1));
        if (i >= m) continue;
        const unsigned stamp = base + static_cast<unsigned>(block);
        eu[i] = find_root(word, eu[i], stamp);
        ev[i] = find_root(word, ev[i], stamp);
    }
}

// The last levels: one thread per block of 1 << log_tail edges runs the sequential union-find
// (stamp base + block). Afterwards eu[i], ev[i] are the reps of T_{<i}; equal reps (a cycle: the
// edges are no tree) set *cycle.
extern "C" __global__ void finish_blocks(int m, int log_tail, unsigned base, int* __restrict__ eu,
                                         int* __restrict__ ev, u64* __restrict__ word, int* __restrict__ cycle) {
    const long long tail = 1LL << log_tail;
    const long long stride = static_cast<long long>(blockDim.x) * gridDim.x;
    const long long blocks = (m + tail - 1) / tail;
    for (long long block = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; block < blocks;
         block += stride) {
        const unsigned stamp = base + static_cast<unsigned>(block);
        const long long end = (block + 1) * tail < m ? (block + 1) * tail : m;
        for (long long i = block * tail; i < end; ++i) {
            const int ru = find_root(word, eu[i], stamp);
            const int rv = find_root(word, ev[i], stamp);
            eu[i] = ru;
            ev[i] = rv;
            if (ru == rv) {
                *cycle = 1;
                continue;
            }
            word[dmax(ru, rv)] = make_word(stamp, dmin(ru, rv));  // only this thread links for stamp
        }
    }
}

// eu, ev -> winner (the smaller rep), loser (the larger) in place.
extern "C" __global__ void winners(int m, int* __restrict__ eu, int* __restrict__ ev) {
    const int stride = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        const int a = eu[i];
        const int b = ev[i];
        eu[i] = dmin(a, b);
        ev[i] = dmax(a, b);
    }
}

// Per vertex: no group yet (last_won = -1), tour tokens enter -> leave, leave -> end (-1).
extern "C" __global__ void init_tour(int n, int* __restrict__ last_won, int* __restrict__ succ) {
    const int stride = blockDim.x * gridDim.x;
    for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < n; x += stride) {
        last_won[x] = -1;
        succ[2 * x] = 2 * x + 1;
        succ[2 * x + 1] = -1;
    }
}

// Over the edges sorted by winner (order): each group's last edge, and the tour's links: a
// winner's first loser is entered after the winner; after leaving a loser comes the next loser
// of its group or the winner's leave token.
extern "C" __global__ void link_groups(int m, const long long* __restrict__ order, const int* __restrict__ winner,
                                       const int* __restrict__ loser, int* __restrict__ last_won,
                                       int* __restrict__ succ) {
    const int stride = blockDim.x * gridDim.x;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < m; p += stride) {
        const int e = static_cast<int>(order[p]);
        const int r = winner[e];
        const int c = loser[e];
        if (p == 0 || winner[order[p - 1]] != r) succ[2 * r] = 2 * c;
        if (p == m - 1 || winner[order[p + 1]] != r) {
            last_won[r] = e;
            succ[2 * c + 1] = 2 * r + 1;
        } else {
            succ[2 * c + 1] = 2 * loser[order[p + 1]];
        }
    }
}

// A fixed pseudo-random choice of splitters: token 0 (the tour's start) and about 1 in `spacing`.
__device__ __forceinline__ bool is_splitter(int t, int spacing) {
    unsigned h = static_cast<unsigned>(t);
    h ^= h >> 16;
    h *= 0x85EBCA6BU;
    h ^= h >> 13;
    h *= 0xC2B2AE35U;
    h ^= h >> 16;
    return t == 0 || (h & static_cast<unsigned>(spacing - 1)) == 0;
}

extern "C" __global__ void mark_splitters(int tokens, int spacing, unsigned char* __restrict__ flag) {
    const long long stride = static_cast<long long>(blockDim.x) * gridDim.x;
    for (long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens; t += stride) {
        flag[t] = is_splitter(static_cast<int>(t), spacing) ? 1 : 0;
    }
}

// Splitter j (token splitters[j]) walks its sublist: every token it passes gets owner j and its
// offset; next[j] is the following splitter (-1 at the end), count[j] the sublist's length.
extern "C" __global__ void walk_sublists(int num_splitters, int spacing, const int* __restrict__ splitters,
                                         const int* __restrict__ succ, int* __restrict__ owner,
                                         int* __restrict__ offset, int* __restrict__ next, int* __restrict__ count) {
    const int stride = blockDim.x * gridDim.x;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < num_splitters; j += stride) {
        int t = splitters[j];
        owner[t] = j;
        offset[t] = 0;
        int k = 1;
        while (true) {
            t = succ[t];
            if (t < 0) {
                next[j] = -1;
                break;
            }
            if (is_splitter(t, spacing)) {
                next[j] = -2 - t;  // a token: resolved to its splitter by splitter_links
                break;
            }
            owner[t] = j;
            offset[t] = k++;
        }
        count[j] = k;
    }
}

// next[j] held -2 - token of the following splitter: now its index (owner of that token).
extern "C" __global__ void splitter_links(int num_splitters, const int* __restrict__ owner, int* __restrict__ next) {
    const int stride = blockDim.x * gridDim.x;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < num_splitters; j += stride) {
        const int t = next[j];
        if (t <= -2) next[j] = owner[-2 - t];
    }
}

// One pointer-jumping step over the splitters: sum[j] becomes the length of the list from j on.
extern "C" __global__ void jump(int num_splitters, const int* __restrict__ sum_in, const int* __restrict__ next_in,
                                int* __restrict__ sum_out, int* __restrict__ next_out) {
    const int stride = blockDim.x * gridDim.x;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < num_splitters; j += stride) {
        const int k = next_in[j];
        sum_out[j] = k < 0 ? sum_in[j] : sum_in[j] + sum_in[k];
        next_out[j] = k < 0 ? -1 : next_in[k];
    }
}

__device__ __forceinline__ int tour_pos(int t, int tokens, const int* owner, const int* offset,
                                        const int* suffix) {
    return tokens - suffix[owner[t]] + offset[t];
}

// The linkage rows, row e = [min(child), max(child), w[e], size] in float64.
extern "C" __global__ void write_rows(int m, int n, const long long* __restrict__ order,
                                      const int* __restrict__ winner, const int* __restrict__ loser,
                                      const int* __restrict__ last_won, const int* __restrict__ owner,
                                      const int* __restrict__ offset, const int* __restrict__ suffix,
                                      const double* __restrict__ w, double* __restrict__ out) {
    const int stride = blockDim.x * gridDim.x;
    const int tokens = 2 * n;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < m; p += stride) {
        const int e = static_cast<int>(order[p]);
        const int r = winner[e];
        const int c = loser[e];
        const int before = p > 0 ? static_cast<int>(order[p - 1]) : -1;
        const int child_r = before >= 0 && winner[before] == r ? n + before : r;
        const int child_c = last_won[c] >= 0 ? n + last_won[c] : c;
        const int span = tour_pos(2 * c + 1, tokens, owner, offset, suffix) -
                         tour_pos(2 * r, tokens, owner, offset, suffix);
        double* row = out + 4LL * e;
        row[0] = static_cast<double>(dmin(child_r, child_c));
        row[1] = static_cast<double>(dmax(child_r, child_c));
        row[2] = w[e];
        row[3] = static_cast<double>(1 + span / 2);
    }
}
