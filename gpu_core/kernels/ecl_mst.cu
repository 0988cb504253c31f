// ECL-MST (Fallin, Gonzalez, Seo, Burtscher, SC'23) for resident graphs.
//
// Keys. The paper packs `weight:edge_id` into a 64-bit atomicMin key. Here every
// undirected edge is ranked once, when the graph becomes resident, by
// (weight, edge_id); the rank encodes the whole tie order for any weight dtype
// (int64 and float64 included), so the loop compares 32-bit ranks only and maps
// ranks back to edge ids at the end.
//
// Graph. A CSR holding every loop-free edge once, in the row of its smaller endpoint:
// row_ptr[n + 1] and adj[slot] = {larger endpoint, rank}, the slots of every row in
// ascending rank order (so the edges under a rank threshold are a prefix of each row).
// The paper's input is the symmetric CSR, whose init takes each edge from its smaller
// endpoint only; the other direction is never read, so it is not stored: half the slots
// to scan in both fills and 8 bytes less per edge.
//
// Slot indices. A graph of 2 * k < 2^31 slots indexes them (row_ptr, split, worklist
// positions) with `int`; a larger one with `long long` (the kernels that touch slots are
// templates on the index type `Slot`, picked per graph when it is built). Ranks and edge
// ids are `unsigned` in both: at most 2^32 - 1 edges.
//
// Worklists. Items are 3-tuples {u, v, rank} stored as one struct (the paper's
// "tuples" optimization), u and v being set representatives (its "implicit path
// compression"). Two worklists alternate; their sizes live on the device, and the
// loops run there too (link_lightest's `loop`), so a run reads nothing back until it ends.
//
// One iteration is two kernels:
//   select_lightest  find the sets of both endpoints, drop edges inside one set,
//                    push the rest (with representatives) to the other worklist and
//                    atomicMin their rank into both sets' `lightest` slot (guarded
//                    by a plain load first: most atomics would not lower it);
//   link_lightest    an edge that is the lightest of either endpoint set joins the
//                    sets (lock-free, atomicCAS) and enters the forest (a bit per edge id).
// A phase's first select is folded into its fill: init_worklist offers every item it pushes to
// its sets' minima, so the phase starts with a link.
// The paper's third kernel (clearing the minima) is folded into link_lightest:
// `lightest` has two copies used in alternate iterations, and link_lightest clears
// the copy the next iteration will use at the endpoints of its own items, which
// are all the sets the next iteration can touch.
//
// Design: docs/design/engine.md.

// cudaGraphSetConditional (a builtin of the CUDA runtime's device side, no device runtime library
// needed) ends the run's device loops. It is a symbol the driver resolves when it loads the module,
// and drivers before CUDA 12.4 have none, so it is compiled in only with MST_DEVICE_LOOPS: the build
// of this file that graphs running on the device's loops load (gpu_core/_backend/kernels.py); every
// other kernel, and link_lightest in the host's loop, come from the build without it.
// NVRTC does not declare it and the toolkit wheels' header cannot be included there.
#if defined(__CUDACC_RTC__)
typedef unsigned long long cudaGraphConditionalHandle;
#if defined(MST_DEVICE_LOOPS)
extern "C" __device__ __attribute__((cudart_builtin)) void cudaGraphSetConditional(cudaGraphConditionalHandle handle,
                                                                                   unsigned int value);
#endif
#endif

#define FULL_MASK 0xffffffffu

// A worklist entry: an edge between the sets of u and v, and its rank.
struct Item {
  int u;
  int v;
  unsigned rank;
};

namespace {

constexpr int kWarpSize = 32;
constexpr unsigned kNoEdge = 0xffffffffu;

__device__ __forceinline__ int lane_id() { return threadIdx.x & (kWarpSize - 1); }

// Root of v's set. Nothing writes `parent` while select_lightest or init run.
__device__ __forceinline__ int find_root(const int* __restrict__ parent, int v) {
  int p = parent[v];
  while (p != v) {
    v = p;
    p = parent[v];
  }
  return v;
}

// Same, while other threads may be writing `parent` (prepare_second_phase): every read goes to memory.
__device__ __forceinline__ int find_root_live(const volatile int* parent, int v) {
  int p = parent[v];
  while (p != v) {
    v = p;
    p = parent[v];
  }
  return v;
}

// Lock-free union of the sets of a and b, roots when their item was selected (others may have
// linked them since). A root is only ever linked under a smaller id, so parent pointers always
// decrease and never form a cycle, and each set's root is its smallest vertex. No walk to the
// current roots first: the CAS on the larger id's pointer either links it or returns its new
// parent, and the union goes on from there (one dependent access fewer for most links).
__device__ void link_sets(int* parent, int a, int b) {
  while (a != b) {
    const int hi = max(a, b);
    const int lo = min(a, b);
    const int seen = atomicCAS(&parent[hi], hi, lo);
    if (seen == hi) return;
    a = lo;
    b = seen;
  }
}

// Warp-aggregated append: one atomicAdd per warp. Every lane of the warp must call it.
template <typename T>
__device__ __forceinline__ void warp_push(bool active, const T& value, T* __restrict__ list,
                                          unsigned* __restrict__ count) {
  const unsigned mask = __ballot_sync(FULL_MASK, active);
  if (mask == 0) return;
  const int lane = lane_id();
  const int leader = __ffs(mask) - 1;
  unsigned base = 0;
  if (lane == leader) base = atomicAdd(count, static_cast<unsigned>(__popc(mask)));
  base = __shfl_sync(FULL_MASK, base, leader);
  if (active) list[base + __popc(mask & ((1u << lane) - 1u))] = value;
}

// An item's rank offered as the lightest edge of both its sets. Atomic guards: a plain load first
// (most atomics would not lower it); a stale value is only ever too large.
__device__ __forceinline__ void offer_lightest(unsigned* lightest, const Item& item) {
  if (lightest[item.u] > item.rank) atomicMin(&lightest[item.u], item.rank);
  if (lightest[item.v] > item.rank) atomicMin(&lightest[item.v], item.rank);
}

// First index a warp handles in a grid-stride loop, and the stride. Whole warps
// iterate together so the warp primitives always see all 32 lanes.
__device__ __forceinline__ int warp_start() { return blockIdx.x * blockDim.x + (threadIdx.x & ~(kWarpSize - 1)); }
__device__ __forceinline__ int grid_stride() { return gridDim.x * blockDim.x; }

}  // namespace

// Per run: every vertex its own set, both copies of `lightest` empty, counters zero.
// Also: no edge in the forest yet (one bit per edge id).
extern "C" __global__ void reset_state(int n, int* __restrict__ parent, unsigned* __restrict__ lightest0,
                                       unsigned* __restrict__ lightest1, unsigned* __restrict__ in_forest,
                                       int num_words, unsigned* __restrict__ counters, int num_counters) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  for (int v = tid; v < n; v += grid_stride()) {
    parent[v] = v;
    lightest0[v] = kNoEdge;
    lightest1[v] = kNoEdge;
  }
  for (int w = tid; w < num_words; w += grid_stride()) in_forest[w] = 0u;
  if (tid < num_counters) counters[tid] = 0u;
}

// Between the two filtering phases: both copies of `lightest` empty again, and every
// vertex pointing straight at its root. The second phase looks up the set of both
// endpoints of every remaining edge, starting from original vertex ids whose paths
// grew in every round of the first phase; flattening them once is far cheaper.
// Concurrent writes only ever store a root, an ancestor of the old value.
extern "C" __global__ void prepare_second_phase(int n, int* parent, unsigned* __restrict__ lightest0,
                                                unsigned* __restrict__ lightest1) {
  for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < n; v += grid_stride()) {
    lightest0[v] = kNoEdge;
    lightest1[v] = kNoEdge;
    const int root = find_root_live(parent, v);
    if (parent[v] != root) parent[v] = root;
  }
}

// Whether slot edge e of vertex v (whose set is set_v) goes on the worklist, and as what.
// Every slot is an edge to a larger vertex (each edge is stored once). In the second phase
// both endpoints are replaced by their sets and edges inside one set are filtered out.
// `skip` (null in ordinary runs): a bit set by rank of edges left out of this run (a what-if).
// The second phase may run in several rounds of rank ranges (64-bit graphs, whose worklists
// hold half the edges): a round takes the ranks below `rank_end`; those of earlier rounds lie
// inside one set by then and are filtered out like any other.
template <bool kSecondPhase>
__device__ __forceinline__ bool take_slot(int v, int set_v, int2 e, const int* __restrict__ parent,
                                          const unsigned* __restrict__ skip, unsigned rank_end, Item& item) {
  const unsigned rank = static_cast<unsigned>(e.y);
  if (kSecondPhase && rank >= rank_end) return false;
  if (skip != nullptr && ((skip[rank >> 5] >> (rank & 31)) & 1u)) return false;
  if (!kSecondPhase) {
    item = Item{v, e.x, rank};
    return true;
  }
  const int set_n = parent[e.x];  // prepare_second_phase left every vertex pointing at its root
  item = Item{set_v, set_n, rank};
  return set_v != set_n;
}

// The whole warp scans slots [beg, end) of vertex v, 32 at a time.
template <bool kSecondPhase, typename Slot>
__device__ __forceinline__ void warp_scan(int v, int set_v, Slot beg, Slot end, const int2* __restrict__ adj,
                                          const int* __restrict__ parent, const unsigned* __restrict__ skip,
                                          unsigned rank_end, Item* __restrict__ worklist,
                                          unsigned* __restrict__ worklist_size, unsigned* lightest) {
  for (Slot chunk = beg; chunk < end; chunk += kWarpSize) {
    const Slot s = chunk + lane_id();
    Item item{};
    const bool push = s < end && take_slot<kSecondPhase>(v, set_v, adj[s], parent, skip, rank_end, item);
    if (push) offer_lightest(lightest, item);
    warp_push(push, item, worklist, worklist_size);
  }
}

// The slots [beg, end) of the warp's 32 rows (one per lane) as one stream of sum(end - beg)
// positions: lane l takes positions t + l, t = 0, 32, ..., and finds its position's row by a
// binary search over the lanes' inclusive prefix sums of their row lengths (shuffles). Every
// lane has work in every step however the lengths are spread, and the warp's loads cover
// neighbouring slots. Rows must be shorter than 2^31 / 32 slots. Every lane must call it.
template <bool kSecondPhase, typename Slot>
__device__ __forceinline__ void warp_rows(int v, int set_v, Slot beg, Slot end, const int2* __restrict__ adj,
                                          const int* __restrict__ parent, const unsigned* __restrict__ skip,
                                          unsigned rank_end, Item* __restrict__ worklist,
                                          unsigned* __restrict__ worklist_size, unsigned* lightest) {
  const int lane = lane_id();
  const int length = static_cast<int>(end - beg);
  int upto = length;  // inclusive prefix sum over the lanes
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const int y = __shfl_up_sync(FULL_MASK, upto, offset);
    if (lane >= offset) upto += y;
  }
  const int total = __shfl_sync(FULL_MASK, upto, kWarpSize - 1);
  for (int first = 0; first < total; first += kWarpSize) {
    const int at = first + lane;
    int row = 0;  // the number of lanes whose rows end at or before `at`: the lane of its row
    for (int step = kWarpSize / 2; step > 0; step >>= 1) {
      if (__shfl_sync(FULL_MASK, upto, row + step - 1) <= at) row += step;
    }
    const int row_v = __shfl_sync(FULL_MASK, v, row);
    const int row_set = __shfl_sync(FULL_MASK, set_v, row);
    const Slot row_beg = __shfl_sync(FULL_MASK, beg, row);
    const int row_first = __shfl_sync(FULL_MASK, upto - length, row);
    Item item{};
    const bool push = at < total && take_slot<kSecondPhase>(row_v, row_set, adj[row_beg + (at - row_first)],
                                                            parent, skip, rank_end, item);
    if (push) offer_lightest(lightest, item);
    warp_push(push, item, worklist, worklist_size);
  }
}

// Algorithm 2, lines 1-11: fill the first worklist from the CSR.
//
// Filtering (average degree >= 4): the first phase takes the edges with rank below the
// threshold, which are slots [row_ptr[v], split[v]) of every row (rows are rank-sorted);
// the second phase takes slots [split[v], row_ptr[v + 1]) after the first phase has run
// and prepare_second_phase has pointed every vertex at its root (one read finds a set).
//
// Load balance. Each warp takes 32 consecutive rows and spreads their slots over its lanes
// (warp_rows), whatever the rows' lengths: the paper gives short rows a thread each and long
// ones a warp (its hybrid parallelism), which leaves lanes idle while the warp's longest short
// row goes on, and reads each row's slots from one lane, 32 rows apart. Rows of `chunk` or
// more slots (the hubs of skewed graphs) would leave one warp working long after the rest have
// finished, so they are cut into chunks of `chunk` slots, listed once per graph in
// heavy_chunks = {row, first slot} (two Slot values each), one warp a chunk.
template <bool kSecondPhase, typename Slot>
__global__ void init_worklist(const Slot* __restrict__ row_ptr, const Slot* __restrict__ split,
                              const int2* __restrict__ adj, int n, int chunk,
                              const Slot* __restrict__ heavy_chunks, int num_heavy_chunks,
                              const int* __restrict__ parent, Item* __restrict__ worklist,
                              unsigned* __restrict__ worklist_size, unsigned* lightest,
                              const unsigned* __restrict__ skip, unsigned rank_end) {
  for (int first = warp_start(); first < n; first += grid_stride()) {
    const int v = first + lane_id();
    Slot beg = 0;
    Slot end = 0;
    if (v < n && row_ptr[v + 1] - row_ptr[v] < chunk) {
      beg = kSecondPhase ? split[v] : row_ptr[v];
      end = kSecondPhase ? row_ptr[v + 1] : split[v];
    }
    const int set_v = (kSecondPhase && beg < end) ? parent[v] : v;
    warp_rows<kSecondPhase, Slot>(v, set_v, beg, end, adj, parent, skip, rank_end, worklist, worklist_size,
                                  lightest);
  }

  // Chunks of the heavy rows, one warp each.
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / kWarpSize;
  const int num_warps = grid_stride() / kWarpSize;
  for (int t = warp; t < num_heavy_chunks; t += num_warps) {
    const int v = static_cast<int>(heavy_chunks[2 * t]);
    const Slot first_slot = heavy_chunks[2 * t + 1];
    const Slot lo = kSecondPhase ? split[v] : row_ptr[v];
    const Slot hi = kSecondPhase ? row_ptr[v + 1] : split[v];
    const Slot beg = max(first_slot, lo);
    const Slot end = min(first_slot + chunk, hi);
    if (beg >= end) continue;  // uniform across the warp
    const int set_v = kSecondPhase ? parent[v] : v;
    warp_scan<kSecondPhase, Slot>(v, set_v, beg, end, adj, parent, skip, rank_end, worklist, worklist_size,
                                  lightest);
  }
}

// Algorithm 2, lines 13-23. Slot: the index type of worklist positions.
template <typename Slot>
__global__ void select_lightest(const Item* __restrict__ items, const unsigned* __restrict__ num_items,
                                Item* __restrict__ next_items, unsigned* __restrict__ num_next,
                                const int* __restrict__ parent, unsigned* lightest) {
  const Slot size = static_cast<Slot>(*num_items);
  for (Slot first = warp_start(); first < size; first += grid_stride()) {
    const Slot i = first + lane_id();
    bool push = false;
    Item item{};
    if (i < size) {
      const Item e = items[i];
      const int p = find_root(parent, e.u);
      const int q = find_root(parent, e.v);
      if (p != q) {
        push = true;
        item = Item{p, q, e.rank};
        offer_lightest(lightest, item);
      }
    }
    warp_push(push, item, next_items, num_next);
  }
}

// Algorithm 2, lines 26-33, plus the clearing of the other `lightest` copy and of the
// size of the worklist the next iteration fills.
//
// `loop`: in the run's CUDA graph (gpu_core/_backend/device_loops.py) the second link of every
// pair of iterations decides whether its loop goes on, another pair while the worklist it links
// holds items (the next select reads it; the other worklist is the one this kernel empties).
// Elsewhere `ends_pair` is 0 and `loop` unused; without MST_DEVICE_LOOPS both are unused.
template <typename Slot>
__global__ void link_lightest(const Item* __restrict__ items, const unsigned* __restrict__ num_items,
                              int* parent, const unsigned* __restrict__ lightest, unsigned* lightest_next,
                              unsigned* __restrict__ num_refill, const unsigned* __restrict__ rank_to_id,
                              unsigned* __restrict__ in_forest, cudaGraphConditionalHandle loop, int ends_pair) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *num_refill = 0u;
#if defined(MST_DEVICE_LOOPS)
    if (ends_pair) cudaGraphSetConditional(loop, *num_items != 0u);
#endif
  }
  const Slot size = static_cast<Slot>(*num_items);
  for (Slot first = warp_start(); first < size; first += grid_stride()) {
    const Slot i = first + lane_id();
    if (i < size) {
      const Item e = items[i];
      const unsigned r = e.rank;
      // Every load this item needs is issued before the link's chain of dependent accesses. The
      // next iteration's copy only ever gets kNoEdge here, so a value read early is either kNoEdge
      // still or worth clearing (many items share an endpoint: look before writing).
      const bool joins = lightest[e.u] == r || lightest[e.v] == r;
      const bool clear_u = lightest_next[e.u] != kNoEdge;
      const bool clear_v = lightest_next[e.v] != kNoEdge;
      if (joins) {
        const unsigned edge_id = rank_to_id[r];
        link_sets(parent, e.u, e.v);
        atomicOr(&in_forest[edge_id >> 5], 1u << (edge_id & 31));
      }
      if (clear_u) lightest_next[e.u] = kNoEdge;
      if (clear_v) lightest_next[e.v] = kNoEdge;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Re-ranking a resident graph (new weights, or the other order): the CSR's structure stays,
// every slot gets its edge's new rank, and every row is stably partitioned into the slots
// under the filter threshold and the rest (`split`). Two kernels; the sort of the edges by
// their new order (CUB, through CuPy) and one prefix sum come before them.

// order[i] is the edge id of the i-th edge in the new order; upto[i] counts the non-loop edges
// among order[0..i] (an inclusive prefix sum of nonloop[order]). Writes the rank of every
// non-loop edge id and the rank -> edge id map.
template <typename Slot>
__global__ void assign_ranks(const long long* __restrict__ order, const unsigned* __restrict__ upto,
                             const bool* __restrict__ nonloop, Slot m, unsigned* __restrict__ rank_of_id,
                             unsigned* __restrict__ rank_to_id) {
  for (Slot i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += grid_stride()) {
    const long long id = order[i];
    if (nonloop[id]) {
      const unsigned r = upto[i] - 1u;
      rank_of_id[id] = r;
      rank_to_id[r] = static_cast<unsigned>(id);
    }
  }
}

// nonloop[rank_to_id[r]] = true for every rank r (the ids of the loop-free edges).
extern "C" __global__ void mark_ids(const unsigned* __restrict__ rank_to_id, long long k, bool* __restrict__ nonloop) {
  for (long long r = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; r < k; r += grid_stride()) {
    nonloop[rank_to_id[r]] = true;
  }
}

// Every slot's new rank: rank_of_id[rank_to_id[old rank]], one pass over the slots.
extern "C" __global__ void slot_ranks(const int2* __restrict__ adj, long long slots,
                                      const unsigned* __restrict__ rank_to_id,
                                      const unsigned* __restrict__ rank_of_id, unsigned* __restrict__ out) {
  for (long long s = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; s < slots;
       s += grid_stride()) {
    out[s] = rank_of_id[rank_to_id[static_cast<unsigned>(adj[s].y)]];
  }
}

// out[i] = table[index[i]] with a uint32 index (a bit-set byte per rank, say).
template <typename T>
__global__ void take_by_u32(const T* __restrict__ table, const unsigned* __restrict__ index, long long count,
                            T* __restrict__ out) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += grid_stride()) {
    out[i] = table[index[i]];
  }
}

// Slot s of row v holds {neighbour, old rank}; slot_rank[s] is its edge's new rank. Each row is
// written to `out` with its light slots (new rank < threshold) first, in slot order, then the
// rest; split[v] = where the rest start. Rows under a warp's width go to their own lane, longer
// rows to the whole warp, 32 slots at a time (ballots give the positions).
template <typename Slot>
__global__ void partition_rows(const Slot* __restrict__ row_ptr, const int2* __restrict__ adj,
                               const unsigned* __restrict__ slot_rank, unsigned threshold, int n,
                               int2* __restrict__ out, Slot* __restrict__ split) {
  const int lane = lane_id();
  const unsigned below_lane = (1u << lane) - 1u;
  for (int first = warp_start(); first < n; first += grid_stride()) {
    const int v = first + lane;
    const Slot beg = v < n ? row_ptr[v] : 0;
    const Slot end = v < n ? row_ptr[v + 1] : 0;
    const bool by_lane = end - beg < kWarpSize;
    if (v < n && by_lane) {
      int light = 0;
      for (Slot s = beg; s < end; ++s) light += slot_rank[s] < threshold;
      Slot lo = beg;
      Slot hi = beg + light;
      for (Slot s = beg; s < end; ++s) {
        const unsigned r = slot_rank[s];
        out[r < threshold ? lo++ : hi++] = make_int2(adj[s].x, static_cast<int>(r));
      }
      split[v] = beg + light;
    }
    unsigned pending = __ballot_sync(FULL_MASK, v < n && !by_lane);
    while (pending) {
      const int owner = __ffs(pending) - 1;
      pending &= pending - 1;
      const Slot row_beg = __shfl_sync(FULL_MASK, beg, owner);
      const Slot row_end = __shfl_sync(FULL_MASK, end, owner);
      Slot light = 0;
      for (Slot chunk = row_beg; chunk < row_end; chunk += kWarpSize) {
        const Slot s = chunk + lane;
        light += __popc(__ballot_sync(FULL_MASK, s < row_end && slot_rank[s] < threshold));
      }
      Slot lo = row_beg;
      Slot hi = row_beg + light;
      for (Slot chunk = row_beg; chunk < row_end; chunk += kWarpSize) {
        const Slot s = chunk + lane;
        const unsigned r = s < row_end ? slot_rank[s] : 0u;
        const bool is_light = s < row_end && r < threshold;
        const unsigned light_mask = __ballot_sync(FULL_MASK, is_light);
        const unsigned heavy_mask = __ballot_sync(FULL_MASK, s < row_end && !is_light);
        if (s < row_end) {
          const Slot at = is_light ? lo + __popc(light_mask & below_lane) : hi + __popc(heavy_mask & below_lane);
          out[at] = make_int2(adj[s].x, static_cast<int>(r));
        }
        lo += __popc(light_mask);
        hi += __popc(heavy_mask);
      }
      if (lane == owner) split[v] = row_beg + light;
    }
  }
}

// ---------------------------------------------------------------------------------------
// The forest as ascending edge ids: compaction of the in_forest bit set, in three kernels
// (count per tile, scan the tile counts, write), so a whole run needs no sort and no host.

constexpr int kScanBlock = 256;    // threads of the count and write kernels
constexpr int kWordsPerThread = 8;  // consecutive bit-set words per thread
constexpr int kTileWords = kScanBlock * kWordsPerThread;

namespace {

// Exclusive prefix sum over the block; *total gets the block's sum. All threads must call.
__device__ int block_exclusive_sum(int x, int* total) {
  __shared__ int warp_sums[32];
  const int lane = lane_id();
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  int inclusive = x;
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const int y = __shfl_up_sync(FULL_MASK, inclusive, offset);
    if (lane >= offset) inclusive += y;
  }
  if (lane == kWarpSize - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int s = lane < num_warps ? warp_sums[lane] : 0;
    for (int offset = 1; offset < kWarpSize; offset <<= 1) {
      const int y = __shfl_up_sync(FULL_MASK, s, offset);
      if (lane >= offset) s += y;
    }
    warp_sums[lane] = s;
  }
  __syncthreads();
  const int result = (warp ? warp_sums[warp - 1] : 0) + inclusive - x;
  *total = warp_sums[num_warps - 1];
  __syncthreads();  // warp_sums may be reused by the next call
  return result;
}

__device__ __forceinline__ int thread_bits(const unsigned* __restrict__ words, int num_words, int first) {
  int count = 0;
  for (int k = 0; k < kWordsPerThread; ++k) {
    if (first + k < num_words) count += __popc(words[first + k]);
  }
  return count;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kScanBlock)
    count_forest_tiles(const unsigned* __restrict__ in_forest, int num_words, int* __restrict__ tile_counts) {
  for (int tile = blockIdx.x; tile * kTileWords < num_words; tile += gridDim.x) {
    const int first = tile * kTileWords + threadIdx.x * kWordsPerThread;
    int total;
    block_exclusive_sum(thread_bits(in_forest, num_words, first), &total);
    if (threadIdx.x == 0) tile_counts[tile] = total;
  }
}

// One block: tile counts -> exclusive tile offsets, and the forest size.
extern "C" __global__ void scan_forest_tiles(int* __restrict__ tile_counts, int num_tiles,
                                             unsigned* __restrict__ forest_size) {
  const int per_thread = (num_tiles + blockDim.x - 1) / blockDim.x;
  const int first = threadIdx.x * per_thread;
  int sum = 0;
  for (int k = 0; k < per_thread && first + k < num_tiles; ++k) sum += tile_counts[first + k];
  int total;
  int offset = block_exclusive_sum(sum, &total);
  for (int k = 0; k < per_thread && first + k < num_tiles; ++k) {
    const int c = tile_counts[first + k];
    tile_counts[first + k] = offset;
    offset += c;
  }
  if (threadIdx.x == 0) *forest_size = static_cast<unsigned>(total);
}

extern "C" __global__ void __launch_bounds__(kScanBlock)
    write_forest_ids(const unsigned* __restrict__ in_forest, int num_words,
                     const int* __restrict__ tile_offsets, long long* __restrict__ forest) {
  for (int tile = blockIdx.x; tile * kTileWords < num_words; tile += gridDim.x) {
    const int first = tile * kTileWords + threadIdx.x * kWordsPerThread;
    int total;
    int out = tile_offsets[tile] + block_exclusive_sum(thread_bits(in_forest, num_words, first), &total);
    for (int k = 0; k < kWordsPerThread && first + k < num_words; ++k) {
      unsigned bits = in_forest[first + k];
      while (bits) {
        forest[out++] = (static_cast<long long>(first + k) << 5) + __ffs(bits) - 1;  // int64: the API's dtype
        bits &= bits - 1;
      }
    }
  }
}

// The forest's weights, copied as raw 4- or 8-byte words (the weight dtype does not matter).
template <typename Word>
__global__ void gather_weights(const long long* __restrict__ forest, const unsigned* __restrict__ forest_size,
                               const Word* __restrict__ weight, Word* __restrict__ out) {
  const int size = static_cast<int>(*forest_size);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < size; i += grid_stride()) out[i] = weight[forest[i]];
}

// ---------------------------------------------------------------------------------------
// Building the CSR on the device with little scratch (GpuGraph._build). The edges are ranked
// first: a 64-bit key (order-preserving bits of a 4-byte weight : edge id) per edge, sorted
// once; self-loops get the largest key and end up last. Then the slots are bucketed by row
// range, one chunk of rows at a time, each chunk's keys {row - first row : rank} sorted, so
// the scratch is one chunk's keys, not all k slots'.

namespace {

// Bits of a 4-byte weight whose unsigned order is the weight's order (-0.0 and 0.0 equal,
// as the sorts of both backends compare them).
// Bits only, no float comparison: a flush-to-zero compare would tie subnormals with zero.
__device__ __forceinline__ unsigned order_bits(float w) {
  const unsigned bits = __float_as_uint(w);
  if ((bits & 0x7fffffffu) == 0u) return 0x80000000u;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
__device__ __forceinline__ unsigned order_bits(int w) { return static_cast<unsigned>(w) ^ 0x80000000u; }

constexpr unsigned long long kLoopKey = ~0ull;  // above every real key: edge ids stay below 2^32 - 1

}  // namespace

// key[i] = order bits of weight[i] : i, or kLoopKey for a self-loop. Id: int or long long.
template <typename Weight, typename Id>
__global__ void rank_keys(const Weight* __restrict__ weight, const Id* __restrict__ src,
                          const Id* __restrict__ dst, long long m, unsigned long long* __restrict__ key) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < m; i += grid_stride()) {
    key[i] = src[i] == dst[i] ? kLoopKey
                              : (static_cast<unsigned long long>(order_bits(weight[i])) << 32) |
                                    static_cast<unsigned long long>(i);
  }
}

// out[r] = low 32 bits of key[r] (the edge id of rank r).
extern "C" __global__ void key_ids(const unsigned long long* __restrict__ key, long long k,
                                   unsigned* __restrict__ out) {
  for (long long r = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; r < k; r += grid_stride()) {
    out[r] = static_cast<unsigned>(key[r]);
  }
}

// out[r] = table[index[r]] as int (the endpoints of every rank). Id: int or long long.
template <typename Id>
__global__ void gather_ids(const Id* __restrict__ table, const unsigned* __restrict__ index, long long k,
                           int* __restrict__ out) {
  for (long long r = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; r < k; r += grid_stride()) {
    out[r] = static_cast<int>(table[index[r]]);
  }
}

// Slots of every row (degree) and those of rank below the threshold (light): one slot per
// edge, in the row of its smaller endpoint.
extern "C" __global__ void count_rows(const int* __restrict__ u, const int* __restrict__ v, long long k,
                                      unsigned threshold, unsigned* __restrict__ degree,
                                      unsigned* __restrict__ light) {
  for (long long r = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; r < k; r += grid_stride()) {
    const int row = min(u[r], v[r]);
    atomicAdd(&degree[row], 1u);
    if (r < threshold) atomicAdd(&light[row], 1u);
  }
}

constexpr int kBucketPerThread = 8;  // ranks per thread per tile of bucket_slots

// The slots of rows [row_lo, row_hi) as keys {row - row_lo : rank} (an edge's row: its smaller
// endpoint), appended to `keys` in no particular order (the caller sorts them): one atomicAdd per
// tile of kScanBlock * 8 ranks.
extern "C" __global__ void __launch_bounds__(kScanBlock)
    bucket_slots(const int* __restrict__ u, const int* __restrict__ v, long long k, int row_lo, int row_hi,
                 unsigned long long* __restrict__ keys, unsigned long long* __restrict__ count) {
  __shared__ unsigned long long tile_base;
  const long long tile_ranks = static_cast<long long>(kScanBlock) * kBucketPerThread;
  for (long long tile = blockIdx.x; tile * tile_ranks < k; tile += gridDim.x) {
    const long long first = tile * tile_ranks + static_cast<long long>(threadIdx.x) * kBucketPerThread;
    int mine = 0;
    for (int j = 0; j < kBucketPerThread; ++j) {
      const long long r = first + j;
      if (r < k) {
        const int row = min(u[r], v[r]);
        mine += (row >= row_lo && row < row_hi);
      }
    }
    int total;
    const int offset = block_exclusive_sum(mine, &total);
    if (threadIdx.x == 0) tile_base = total ? atomicAdd(count, static_cast<unsigned long long>(total)) : 0ull;
    __syncthreads();
    unsigned long long at = tile_base + offset;
    for (int j = 0; j < kBucketPerThread; ++j) {
      const long long r = first + j;
      if (r < k) {
        const unsigned long long rank = static_cast<unsigned long long>(r);
        const int row = min(u[r], v[r]);
        if (row >= row_lo && row < row_hi) keys[at++] = (static_cast<unsigned long long>(row - row_lo) << 32) | rank;
      }
    }
    __syncthreads();  // tile_base is rewritten by the next tile
  }
}

// Sorted keys of rows [row_lo, ...) -> adj[first_slot + i] = {the edge's larger endpoint, rank}.
template <typename Slot>
__global__ void write_slots(const unsigned long long* __restrict__ keys, Slot count, Slot first_slot, int row_lo,
                            const int* __restrict__ u, const int* __restrict__ v, int2* __restrict__ adj) {
  for (Slot i = blockIdx.x * static_cast<Slot>(blockDim.x) + threadIdx.x; i < count; i += grid_stride()) {
    const unsigned long long key = keys[i];
    const int row = row_lo + static_cast<int>(key >> 32);
    const unsigned rank = static_cast<unsigned>(key);
    const int a = u[rank];
    adj[first_slot + i] = make_int2(a == row ? v[rank] : a, static_cast<int>(rank));
  }
}

// Explicit instantiations, so nvcc compile checks cover the templates too.
template __global__ void init_worklist<false, int>(const int*, const int*, const int2*, int, int, const int*, int,
                                                   const int*, Item*, unsigned*, unsigned*, const unsigned*, unsigned);
template __global__ void init_worklist<true, int>(const int*, const int*, const int2*, int, int, const int*, int,
                                                  const int*, Item*, unsigned*, unsigned*, const unsigned*, unsigned);
template __global__ void init_worklist<false, long long>(const long long*, const long long*, const int2*, int, int,
                                                         const long long*, int, const int*, Item*, unsigned*,
                                                         unsigned*, const unsigned*, unsigned);
template __global__ void init_worklist<true, long long>(const long long*, const long long*, const int2*, int, int,
                                                        const long long*, int, const int*, Item*, unsigned*,
                                                        unsigned*, const unsigned*, unsigned);
template __global__ void select_lightest<int>(const Item*, const unsigned*, Item*, unsigned*, const int*, unsigned*);
template __global__ void select_lightest<long long>(const Item*, const unsigned*, Item*, unsigned*, const int*,
                                                    unsigned*);
template __global__ void link_lightest<int>(const Item*, const unsigned*, int*, const unsigned*, unsigned*,
                                            unsigned*, const unsigned*, unsigned*, cudaGraphConditionalHandle, int);
template __global__ void link_lightest<long long>(const Item*, const unsigned*, int*, const unsigned*, unsigned*,
                                                  unsigned*, const unsigned*, unsigned*, cudaGraphConditionalHandle,
                                                  int);
template __global__ void assign_ranks<int>(const long long*, const unsigned*, const bool*, int, unsigned*, unsigned*);
template __global__ void assign_ranks<long long>(const long long*, const unsigned*, const bool*, long long,
                                                 unsigned*, unsigned*);
template __global__ void partition_rows<int>(const int*, const int2*, const unsigned*, unsigned, int, int2*, int*);
template __global__ void partition_rows<long long>(const long long*, const int2*, const unsigned*, unsigned, int,
                                                   int2*, long long*);
template __global__ void rank_keys<float, int>(const float*, const int*, const int*, long long, unsigned long long*);
template __global__ void rank_keys<float, long long>(const float*, const long long*, const long long*, long long,
                                                     unsigned long long*);
template __global__ void rank_keys<int, int>(const int*, const int*, const int*, long long, unsigned long long*);
template __global__ void rank_keys<int, long long>(const int*, const long long*, const long long*, long long,
                                                   unsigned long long*);
template __global__ void gather_ids<int>(const int*, const unsigned*, long long, int*);
template __global__ void gather_ids<long long>(const long long*, const unsigned*, long long, int*);
template __global__ void write_slots<int>(const unsigned long long*, int, int, int, const int*, const int*, int2*);
template __global__ void write_slots<long long>(const unsigned long long*, long long, long long, int, const int*,
                                                const int*, int2*);
template __global__ void take_by_u32<unsigned char>(const unsigned char*, const unsigned*, long long,
                                                    unsigned char*);
template __global__ void take_by_u32<unsigned>(const unsigned*, const unsigned*, long long, unsigned*);
template __global__ void gather_weights<unsigned>(const long long*, const unsigned*, const unsigned*, unsigned*);
template __global__ void gather_weights<unsigned long long>(const long long*, const unsigned*,
                                                           const unsigned long long*, unsigned long long*);
