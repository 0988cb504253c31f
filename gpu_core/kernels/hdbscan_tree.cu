// Segment reductions of HDBSCAN*'s condensed tree on the device (gpu_core/_clustering/condense.py,
// through gpu_core/_clustering/dendrogram_labels.py). One thread per segment walks its segment in order, so a sum has the
// bits of the host's sequential sum ("0.0 + v[start] + v[start + 1] + ..."): no atomics, no tree
// reduction. Segments are short (at most a chunk of 1024 points, or a cluster's chunk sums).

extern "C" __global__ void segment_sums(const double* __restrict__ values, const long long* __restrict__ starts,
                                        const long long* __restrict__ ends, long long count,
                                        double* __restrict__ out) {
  const long long s = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= count) return;
  double sum = 0.0;
  const long long end = ends[s];
  for (long long i = starts[s]; i < end; ++i) sum += values[i];
  out[s] = sum;
}

// out[s] = max(0.0, values[starts[s] .. ends[s])); the values are never NaN.
extern "C" __global__ void segment_max(const double* __restrict__ values, const long long* __restrict__ starts,
                                       const long long* __restrict__ ends, long long count,
                                       double* __restrict__ out) {
  const long long s = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= count) return;
  double top = 0.0;
  const long long end = ends[s];
  for (long long i = starts[s]; i < end; ++i) top = values[i] > top ? values[i] : top;
  out[s] = top;
}

// ---- Excess of mass over the cluster tree (gpu_core/_clustering/eom_paths.py) ----------------
// The tree is cut into heavy paths; a path's clusters lie in consecutive slots, its head (the top)
// first and a leaf last. One thread walks one path; a launch runs the paths of one light depth,
// whose light children (heads of deeper paths) were resolved by earlier launches.

constexpr int kEomBatch = 32;  // slots loaded at once before the dependent chain runs over them

// One cluster of the host's loop (``select._eom``): sub = 0.0 + best[second child] + best[first
// child]; chose = !(sub > stability); best = chose ? stability : sub. Here sub = (0.0 + light) + x,
// x the heavy child's best: the same bits whichever child is the second, as a + b == b + a and
// 0.0 + y differs from y only for y = -0.0, which the next addition treats as 0.0 does.
__device__ __forceinline__ bool eom_step(double stability, double light, double& x) {
  const double sub = (0.0 + light) + x;
  const bool kept = !(sub > stability);
  x = kept ? stability : sub;
  return kept;
}

// Bottom-up, from the leaf (sub = 0.0) to the head. ``stability`` and ``light`` (the best of the
// slot's light child; the heavy child is the next slot) are by slot; ``best`` is written at the
// path's head only, as only a parent (on another path) reads it.
extern "C" __global__ void eom_up(const long long* __restrict__ path_start, const long long* __restrict__ path_len,
                                  long long first, long long count, const double* __restrict__ stability,
                                  const double* __restrict__ light, const long long* __restrict__ node_at,
                                  double* __restrict__ best, unsigned char* __restrict__ chose) {
  const long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const long long top = path_start[first + t];
  long long i = top + path_len[first + t] - 1;
  const double leaf = stability[i];
  const bool leaf_kept = !(0.0 > leaf);
  double x = leaf_kept ? leaf : 0.0;
  chose[i] = leaf_kept;
  // slots i - 1 down to top: whole batches with every load issued before the chain needs it.
  // A batch is first run as additions only, guessing that no cluster in it is kept (down the
  // long paths, the spines of deep trees, the children's sum beats a cluster's own stability at
  // nearly every step: two clusters kept in 116,092): the chain is then one addition a step, the
  // comparisons off it. Where every comparison confirms the guess, those sums are the host's
  // values; else the batch runs again step by step.
  for (; i - top >= kEomBatch; i -= kEomBatch) {
    double s[kEomBatch], l[kEomBatch];
#pragma unroll
    for (int j = 0; j < kEomBatch; ++j) {
      s[j] = stability[i - 1 - j];
      l[j] = light[i - 1 - j];
    }
    double y = x;
    bool none_kept = true;
#pragma unroll
    for (int j = 0; j < kEomBatch; ++j) {
      y = (0.0 + l[j]) + y;
      none_kept &= y > s[j];
    }
    if (none_kept) {
      x = y;
#pragma unroll
      for (int j = 0; j < kEomBatch; ++j) chose[i - 1 - j] = 0;
    } else {
#pragma unroll
      for (int j = 0; j < kEomBatch; ++j) chose[i - 1 - j] = eom_step(s[j], l[j], x);
    }
  }
  for (; i > top; --i) chose[i - 1] = eom_step(stability[i - 1], light[i - 1], x);
  best[node_at[top]] = x;
}

// Top-down, per path: ``above[p]``, the anchor of the head's parent (the topmost chosen cluster on
// the way from the root to it, 0 for none), from its path's values: that path's ``above`` if any,
// else its first chosen slot (``first_chosen``, the path's end for none) if the parent lies at or
// below it. A launch runs the paths of one light depth, the shallowest first.
extern "C" __global__ void eom_above(const long long* __restrict__ path_start, long long first, long long count,
                                     const long long* __restrict__ node_at, const long long* __restrict__ parent,
                                     const long long* __restrict__ path_of, const long long* __restrict__ slot_of,
                                     const long long* __restrict__ first_chosen, long long* __restrict__ above) {
  const long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const long long head = node_at[path_start[first + t]];
  long long a = 0;
  if (head != 0) {
    const long long up = parent[head];
    const long long q = path_of[up];
    a = above[q];
    if (a == 0 && slot_of[up] >= first_chosen[q]) a = node_at[first_chosen[q]];
  }
  above[first + t] = a;
}

// ---- Roots of a forest given by parent pointers (_clustering/condense.py, eom_paths.py) ---------
// One launch instead of a pointer-doubling round per level and a host check after each: every
// thread walks from its node to the root, and stores each ancestor it reaches in its own slot.
// Pointers only ever move up, so whatever a thread reads of another's slot, old or new, is an
// ancestor of that node: the walks meet the roots, and they shorten each other's ways as they go.
// Slots are read and written as whole aligned 8-byte words, volatile (never from a stale cache).
// The result, each node's root (and its distance), is unique: the same for any order of threads.
// The order matters for the time: threads start ancestors first (``parents_after``: parents have
// larger ids, so the ids are taken from the last down), so a walk meets shortened ways instead of
// walking a long chain whose threads have not started (every node of it walking the rest: quadratic).

__device__ __forceinline__ long long node_of(long long t, long long n, long long parents_after) {
  return parents_after ? n - 1 - t : t;
}

extern "C" __global__ void find_roots(long long* ptr, long long n, long long parents_after) {
  volatile long long* slot = ptr;
  for (long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long x = node_of(t, n, parents_after);
    long long p = slot[x];
    for (long long up = slot[p]; up != p; up = slot[p]) {
      p = up;
      slot[x] = p;
    }
  }
}

// The same with distances: word = pointer (low 32 bits) | steps to it (high 32 bits), one store.
extern "C" __global__ void find_roots_counted(unsigned long long* words, long long n, long long parents_after) {
  volatile unsigned long long* slot = words;
  for (long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long x = node_of(t, n, parents_after);
    unsigned long long w = slot[x];
    for (unsigned long long up = slot[w & 0xffffffffULL]; (up & 0xffffffffULL) != (w & 0xffffffffULL);
         up = slot[w & 0xffffffffULL]) {
      w = (up & 0xffffffffULL) | (((w >> 32) + (up >> 32)) << 32);
      slot[x] = w;
    }
  }
}
