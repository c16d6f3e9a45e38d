// Table-batched embedding: forward (SUM / MEAN / NONE) and backward fused with EXACT_SGD or
// EXACT_ROWWISE_ADAGRAD. The math is the one written down in reference.py; see tbe_kernels.h.
//
// Forward, pooled: one warp per bag (bag = feature f, sample b), one launch for all features.
//   The warp reads 32 indices of the bag at once (one per lane), then splits into P = 32/G
//   groups of G lanes; each group reads whole rows (float4 per lane when dim % 4 == 0, scalars
//   otherwise), kUnroll rows per group per step (12 float4 loads in flight per lane); the P
//   partial sums are combined with xor-shuffles (a fixed order: deterministic).
//   v2 (ForwardArgs::variant 1..3, dims <= 256): persistent warps that prefetch the next bag's
//   offsets and first indices while pooling the current bag (see tbe_kernels.h).
// Forward, NONE: one thread per (index, float4 or float) of the (N, dim) output.
// Backward: (1) linear row id + sort value of every index position (v1: the position, and the
//   bag of each position by binary search; v2: written bag by bag, the value is the bag (+ its
//   per-sample weight) or the position for NONE); (2) CUB radix sort of (linear id, value) —
//   stable, so equal ids keep position order (v2: 32-bit keys when the ids fit); (3) run-length
//   encode -> unique ids, counts; scans give segment starts; (4) segments longer than kChunk
//   are summed in chunks of kChunk positions (one warp per chunk, into a scratch buffer); (5)
//   one warp per tile of 32 unique rows sums each row's gradients (or its chunk sums) in order
//   and applies the optimizer in place, 32/G rows at a time for rows of G lanes (v2). (4) and
//   (5) run once per "dim class" present (see dim_class in tbe_impl.cuh). Every variant does
//   the same float operations in the same order: the results are bit-identical.
//   No float atomics; every launch over a device-side count is a grid-stride loop, so the host
//   never waits for the device.
// Out-of-range indices are never read: the forward writes NaN for the bag and atomicMin's the
// position into *first_bad; the backward gives them linear id total_rows and skips that segment.
// Weights: float, __half or __nv_bfloat16 (fp32 math; 16-bit rows read 4 elements = 8 bytes per
// lane and stored rounded to nearest even). The kernels live in tbe_impl.cuh; this file holds
// the sort/scan steps and the host API; tbe_kernels_f32.cu / _f16.cu / _bf16.cu instantiate the
// forward and the row update per weight type (four translation units built in parallel).

#include "tbe_impl.cuh"

#include <algorithm>
#include <cub/cub.cuh>

namespace tbe {
namespace detail {

// Chunks of each segment: ceil(count / kChunk) for segments longer than kChunk, else 0. v2
// (ukeys != nullptr): also widens the run-length encoder's KeyT unique ids into unique_ids
// (the invalid key, all ones, becomes total_rows).
template <typename KeyT>
__global__ void count_chunks_kernel(const KeyT* ukeys, int64_t* unique_ids, const int64_t* num_unique,
                                    const int32_t* counts, int32_t* nchunks, int64_t n, int64_t total_rows) {
  const int64_t num_seg = *num_unique;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < n;
       s += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t id = total_rows;
    if (s < num_seg) {
      if (ukeys != nullptr) {
        const KeyT k = ukeys[s];
        id = k < static_cast<uint64_t>(total_rows) ? static_cast<int64_t>(k) : total_rows;
        unique_ids[s] = id;
      } else {
        id = unique_ids[s];
      }
    }
    const int32_t c = id < total_rows ? counts[s] : 0;
    nchunks[s] = c > kChunk ? (c + kChunk - 1) / kChunk : 0;
  }
}

// Drop the out-of-range segment (always last: its key, total_rows or all ones, is the largest)
// from the count.
__global__ void drop_invalid_kernel(const int64_t* unique_ids, int64_t* num_unique, int64_t total_rows) {
  const int64_t n = *num_unique;
  if (n > 0 && unique_ids[n - 1] >= total_rows) *num_unique = n - 1;
}

int bits_for(int64_t v) {  // bits needed to hold 0..v
  int b = 1;
  while (b < 63 && (int64_t{1} << b) <= v) ++b;
  return b;
}

size_t align_up(size_t v) { return (v + 255) & ~size_t{255}; }

int64_t max_chunks(int64_t n) { return n / (kChunk / 2) + 1; }  // sum of ceil(c/kChunk) over c > kChunk

template <typename KeyT, typename ValT>
size_t sort_bytes(int ni, int end_bit) {
  size_t b = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, b, static_cast<const KeyT*>(nullptr), static_cast<KeyT*>(nullptr),
                                  static_cast<const ValT*>(nullptr), static_cast<ValT*>(nullptr), ni, 0, end_bit);
  return b;
}

template <typename KeyT>
size_t rle_bytes(int ni) {
  size_t b = 0;
  cub::DeviceRunLengthEncode::Encode(nullptr, b, static_cast<const KeyT*>(nullptr), static_cast<KeyT*>(nullptr),
                                     static_cast<int32_t*>(nullptr), static_cast<int64_t*>(nullptr), ni);
  return b;
}

size_t cub_bytes(int64_t n, int end_bit) {  // the largest over every key/value type backward() uses
  size_t scan = 0;
  const int ni = static_cast<int>(n);
  cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), ni);
  const size_t sorts[] = {sort_bytes<uint64_t, int32_t>(ni, end_bit), sort_bytes<uint32_t, int32_t>(ni, end_bit),
                          sort_bytes<uint64_t, uint64_t>(ni, end_bit), sort_bytes<uint32_t, uint64_t>(ni, end_bit),
                          rle_bytes<int64_t>(ni), rle_bytes<uint64_t>(ni), rle_bytes<uint32_t>(ni), scan};
  size_t m = 0;
  for (size_t v : sorts) m = std::max(m, v);
  return m;
}

int grid_for(int64_t work, int per_block, int num_sms) {
  const int64_t want = (work + per_block - 1) / per_block;
  const int64_t cap = static_cast<int64_t>(num_sms > 0 ? num_sms : 132) * 32;
  return static_cast<int>(std::max<int64_t>(1, std::min(want, cap)));
}



}  // namespace detail

using namespace detail;

// ------------------------------------------------------------------------------------ host API

cudaError_t forward(const ForwardArgs& a, cudaStream_t stream) {
  switch (a.weights_type) {
    case kWeightsF32: return detail::forward_typed<float>(a, stream);
    case kWeightsF16: return detail::forward_typed<__half>(a, stream);
    case kWeightsBF16: return detail::forward_typed<__nv_bfloat16>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool wide_values(const BackwardArgs& a) {  // v2, weighted pooling: the values carry (bag, weight)
  return a.variant != kBwdV1 && a.psw != nullptr && a.pooling != kPoolNone;
}

size_t backward_workspace_bytes(const BackwardArgs& a) {
  const int64_t n = a.num_indices;
  if (n == 0) return 0;
  const int64_t max_dim = a.max_dim;
  const int64_t stride = (max_dim + 3) / 4 * 4;
  size_t bytes = 0;
  bytes += 2 * align_up(n * sizeof(int64_t));                 // keys in/out
  bytes += 7 * align_up(n * sizeof(int32_t));                 // pos in/out, bag_of, counts, seg_start, nchunks, chunk_off
  if (wide_values(a)) bytes += 2 * align_up(n * sizeof(uint64_t));  // v2 weighted values in/out
  bytes += align_up(max_chunks(n) * stride * sizeof(float));  // partials
  bytes += align_up(cub_bytes(n, bits_for(a.total_rows)));
  return bytes;
}

namespace detail {

// v2 steps (1)-(3) with KeyT sort keys: linear ids written bag by bag, sort, run-length encode
// into the (free after the sort) keys_in buffer; count_chunks widens the unique ids.
template <typename KeyT>
cudaError_t sort_v2(const BackwardArgs& a, Scratch& s, int end_bit, int grid, cudaStream_t stream) {
  const int64_t n = a.num_indices;
  const int ni = static_cast<int>(n);
  KeyT* keys_in = static_cast<KeyT*>(s.keys_in);
  KeyT* keys_out = static_cast<KeyT*>(s.keys_out);
  cudaError_t err;
  // positions in no bag (malformed offsets) keep the invalid key, all ones
  if ((err = cudaMemsetAsync(keys_in, 0xff, n * sizeof(KeyT), stream)) != cudaSuccess) return err;
  int32_t* vals = s.vals64_in != nullptr ? nullptr : s.pos_in;
  if (a.index_is_64) linearize_v2_kernel<int64_t, KeyT><<<grid, kBlock, 0, stream>>>(a, keys_in, vals, s.vals64_in);
  else linearize_v2_kernel<int32_t, KeyT><<<grid, kBlock, 0, stream>>>(a, keys_in, vals, s.vals64_in);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  size_t tb = s.cub_bytes;
  if (s.vals64_in != nullptr) {
    err = cub::DeviceRadixSort::SortPairs(s.cub_temp, tb, keys_in, keys_out, s.vals64_in, s.vals64_out, ni, 0, end_bit,
                                          stream);
  } else {
    err = cub::DeviceRadixSort::SortPairs(s.cub_temp, tb, keys_in, keys_out, s.pos_in, s.pos_out, ni, 0, end_bit,
                                          stream);
  }
  if (err != cudaSuccess) return err;
  if ((err = cudaMemsetAsync(s.counts, 0, n * sizeof(int32_t), stream)) != cudaSuccess) return err;
  tb = s.cub_bytes;
  err = cub::DeviceRunLengthEncode::Encode(s.cub_temp, tb, static_cast<const KeyT*>(keys_out), keys_in, s.counts,
                                           a.num_unique, ni, stream);
  if (err != cudaSuccess) return err;
  const int grid_n = grid_for(n, kBlock, a.num_sms);
  count_chunks_kernel<KeyT><<<grid_n, kBlock, 0, stream>>>(keys_in, a.unique_ids, a.num_unique, s.counts, s.nchunks, n,
                                                          a.total_rows);
  return cudaGetLastError();
}

}  // namespace detail

cudaError_t backward(const BackwardArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const int64_t n = a.num_indices;
  if (n == 0) return cudaMemsetAsync(a.num_unique, 0, sizeof(int64_t), stream);
  if (workspace_bytes < backward_workspace_bytes(a)) return cudaErrorInvalidValue;
  const int end_bit = bits_for(a.total_rows);
  const bool v2 = a.variant != kBwdV1;

  // carve the workspace
  char* p = static_cast<char*>(workspace);
  auto take = [&](size_t bytes) { void* r = p; p += align_up(bytes); return r; };
  Scratch s;
  s.keys_in = take(n * sizeof(int64_t));
  s.keys_out = take(n * sizeof(int64_t));
  s.pos_in = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.pos_out = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.bag_of = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.counts = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.seg_start = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.nchunks = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.chunk_off = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  const bool wide = wide_values(a);
  s.vals64_in = wide ? static_cast<uint64_t*>(take(n * sizeof(uint64_t))) : nullptr;
  s.vals64_out = wide ? static_cast<uint64_t*>(take(n * sizeof(uint64_t))) : nullptr;
  s.v2 = v2;
  s.dim_stride = (a.max_dim + 3) / 4 * 4;
  s.partials = static_cast<float*>(take(max_chunks(n) * s.dim_stride * sizeof(float)));
  s.cub_bytes = cub_bytes(n, end_bit);
  s.cub_temp = take(s.cub_bytes);
  const int ni = static_cast<int>(n);
  cudaError_t err;
  const int grid_n = grid_for(n, kBlock, a.num_sms);

  if (v2) {  // (1)-(3), and the chunk counts of (4)
    const int grid_bags = grid_for((a.num_features * a.batch + kWarp - 1) / kWarp, kWarpsPerBlock, a.num_sms);
    err = a.total_rows < (int64_t{1} << 32) - 1 ? sort_v2<uint32_t>(a, s, end_bit, grid_bags, stream)
                                                : sort_v2<uint64_t>(a, s, end_bit, grid_bags, stream);
    if (err != cudaSuccess) return err;
  } else {
    int64_t* keys_in = static_cast<int64_t*>(s.keys_in);
    int64_t* keys_out = static_cast<int64_t*>(s.keys_out);
    // (1) sort keys: linear row id of every position (stream: the caller's, like every step below)
    if (a.index_is_64) linearize_kernel<int64_t><<<grid_n, kBlock, 0, stream>>>(a, keys_in, s.pos_in, s.bag_of);
    else linearize_kernel<int32_t><<<grid_n, kBlock, 0, stream>>>(a, keys_in, s.pos_in, s.bag_of);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    // (2) stable radix sort of (linear id, position) on the bits the ids use
    size_t tb = s.cub_bytes;
    // keys are >= 0: sort them as unsigned so that only bits [0, end_bit) matter
    err = cub::DeviceRadixSort::SortPairs(s.cub_temp, tb, reinterpret_cast<const uint64_t*>(keys_in),
                                          reinterpret_cast<uint64_t*>(keys_out), s.pos_in, s.pos_out, ni, 0, end_bit,
                                          stream);
    if (err != cudaSuccess) return err;
    // (3) unique ids + counts (count of unique ids stays on the device)
    if ((err = cudaMemsetAsync(s.counts, 0, n * sizeof(int32_t), stream)) != cudaSuccess) return err;
    tb = s.cub_bytes;
    err = cub::DeviceRunLengthEncode::Encode(s.cub_temp, tb, static_cast<const int64_t*>(keys_out), a.unique_ids,
                                             s.counts, a.num_unique, ni, stream);
    if (err != cudaSuccess) return err;
    count_chunks_kernel<int64_t><<<grid_n, kBlock, 0, stream>>>(nullptr, a.unique_ids, a.num_unique, s.counts,
                                                                s.nchunks, n, a.total_rows);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  // (3) segment starts; (4) offsets of the long segments' chunks, one warp per chunk sums
  // kChunk gradient rows
  size_t tb = s.cub_bytes;
  err = cub::DeviceScan::ExclusiveSum(s.cub_temp, tb, static_cast<const int32_t*>(s.counts), s.seg_start, ni, stream);
  if (err != cudaSuccess) return err;
  tb = s.cub_bytes;
  err = cub::DeviceScan::ExclusiveSum(s.cub_temp, tb, static_cast<const int32_t*>(s.nchunks), s.chunk_off, ni, stream);
  if (err != cudaSuccess) return err;
  // (5) one warp per tile of 32 unique rows: sum, optimizer, write back (per dim class)
  const int grid_w = grid_for(n, kWarpsPerBlock, a.num_sms);  // warps: up to 32 blocks of 8 per SM
  if (a.variant == kBwdV3 || a.variant == kBwdV3Stream) {  // gradient rows in batches (grad_batch)
    err = a.index_is_64 ? for_each_class<ChunkSum<int64_t, true>::template K>(a.dim_classes, a, s, grid_w, kClassesWarp, stream)
                        : for_each_class<ChunkSum<int32_t, true>::template K>(a.dim_classes, a, s, grid_w, kClassesWarp, stream);
  } else {
    err = a.index_is_64 ? for_each_class<ChunkSum<int64_t, false>::template K>(a.dim_classes, a, s, grid_w, kClassesWarp, stream)
                        : for_each_class<ChunkSum<int32_t, false>::template K>(a.dim_classes, a, s, grid_w, kClassesWarp, stream);
  }
  if (err != cudaSuccess) return err;
  switch (a.weights_type) {
    case kWeightsF32: err = update_typed<float>(a, s, grid_w, stream); break;
    case kWeightsF16: err = update_typed<__half>(a, s, grid_w, stream); break;
    case kWeightsBF16: err = update_typed<__nv_bfloat16>(a, s, grid_w, stream); break;
    default: err = cudaErrorInvalidValue;
  }
  if (err != cudaSuccess) return err;
  drop_invalid_kernel<<<1, 1, 0, stream>>>(a.unique_ids, a.num_unique, a.total_rows);
  return cudaGetLastError();
}

}  // namespace tbe
