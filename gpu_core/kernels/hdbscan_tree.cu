// Segment reductions of HDBSCAN*'s condensed tree on the device (gpu_core/_condense.py, through
// gpu_core/_hdbscan_gpu.py). One thread per segment walks its segment in order, so a sum has the
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
