// Table-batched embedding kernels: plain CUDA C++, no torch headers (raw pointers + sizes), so
// `nvcc -std=c++17 -arch=sm_90a -c tbe_kernels.cu` checks them on a machine without torch/GPU.
// The torch binding is tbe_binding.cpp; the math is written down in reference.py.
//
// Layout (see common.py): one flat weights buffer (float, __half or __nv_bfloat16: weights_type);
// feature f reads table feature_table[f] whose rows start at element feat_woff[f] (a multiple of
// 4 elements), has feat_rows[f] rows of feat_dim[f] elements, linear row id of its row 0 is
// feat_row_off[f]; its pooled output occupies columns out_off[f] .. out_off[f+1] of the
// (B, total_dim) float output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace tbe {

constexpr int kPoolSum = 0;
constexpr int kPoolMean = 1;
constexpr int kPoolNone = 2;

constexpr int kWeightsF32 = 0;   // weights_type: float
constexpr int kWeightsF16 = 1;   // __half
constexpr int kWeightsBF16 = 2;  // __nv_bfloat16

constexpr int kOptSgd = 0;
constexpr int kOptRowwiseAdagrad = 1;

constexpr int kMaxDim = 1024;       // largest dim the kernels take
constexpr int kChunk = 128;         // backward: segments longer than this are reduced in chunks
constexpr int64_t kNoError = INT64_MAX;  // value of first_bad when every index was in range

// Kernel variants (selectable per call, so one run can time them side by side; every variant
// gives bit-identical results: same operations in the same order).
// Forward (ForwardArgs::variant): 0 = v1 (one warp per bag, 12 row loads in flight per lane,
//   ~127 registers -> 16 warps/SM); 1..3 = v2 (persistent warps that prefetch the next bag's
//   offsets and first 32 indices while pooling the current one; config c = fwd_config(variant):
//   kFwdV2Loads[c] 16-byte loads' worth of rows in flight per lane (16-bit rows are 8 bytes
//   a lane: twice the rows), at kFwdV2MinBlocks[c] blocks of 8 warps per SM); 4..6 = 1..3 plus
//   L2 prefetches: each lane prefetches its row of the 32 indices it holds (prefetch.global.L2,
//   no register, no scoreboard) before the row batches, so a batch rarely waits for DRAM;
//   7, 8 = v3-4 / v3-2, occupancy first (FBGEMM's forward runs ~51 warps/SM with 32 registers):
//   one warp per bag, no prefetch of the next bag, 4 loads at 5 blocks/SM (<= 48 registers) /
//   2 loads at 8 blocks/SM (<= 32 registers). v2 and v3 cover layouts whose dims share v1's lane
//   split, between 17 and 256 (cuda.py: _v2_forward_layout); others run v1.
constexpr int kFwdVariants = 9;
constexpr int kFwdV2Configs = 6;
constexpr int kFwdV2Loads[kFwdV2Configs] = {12, 12, 8, 4, 4, 2};     // [0]: v1's
constexpr int kFwdV2MinBlocks[kFwdV2Configs] = {1, 2, 3, 4, 5, 8};  // 16 / 24 / 32 / 40 / 64 warps per SM
constexpr int kFwdFirstLite = 4;  // configs >= this: one warp per bag (v3)
__host__ __device__ constexpr int fwd_config(int variant) {
  return variant >= 1 && variant <= 3 ? variant : variant >= 4 && variant <= 6 ? variant - 3 : variant >= 7 && variant <= 8 ? variant - 3 : 0;
}
__host__ __device__ constexpr bool fwd_l2_prefetch(int variant) { return variant >= 4 && variant <= 6; }
// Backward (BackwardArgs::variant): 1 = v1 (sort (linear id, position); per row: position ->
//   bag_of[position] -> gradient row; one warp per row); 2 = v2 (linear ids written per bag, no
//   binary search; 32-bit sort keys when the ids fit; the sorted value IS the bag (the bag and
//   its per-sample weight for weighted pooling), so a row's gradient rows are one dependent load
//   away; rows of small dim share a warp: G = 4/8/16 lanes per row); 3 = v2 with 16 lanes per
//   row for 64 < dim <= 256 too (two rows per warp, two float4 per lane per 128 elements);
//   4 = v2 plus L2 prefetches of the weight row (and rowwise-Adagrad state) each group updates
//   two rounds later, for rows of one float4 per lane (dim <= 128); wider rows run v2;
//   5 = v3: v2 with a row's gradient rows (and chunk sums) loaded in batches of 4 / 2 (one /
//   two float4 per lane) issued back to back, then added in order, and held to 4 blocks of 8
//   warps per SM (v2's update took 78-94 registers: 24 / 16 warps per SM), for rows of one
//   float4 per lane and D <= 256; other rows run v2; 6 = v3s: v3 with the weight rows and
//   rowwise-Adagrad state read and written "evict first" (ld/st.global.cs: used once a step)
//   and a grid of one wave, so that L2 keeps the gradient rows of the tables being updated.
constexpr int kBwdV1 = 1;
constexpr int kBwdV2 = 2;
constexpr int kBwdV2TwoRows = 3;
constexpr int kBwdV2Prefetch = 4;
constexpr int kBwdV3 = 5;
constexpr int kBwdV3Stream = 6;

struct ForwardArgs {
  const void* weights;         // flat weights of weights_type (accumulation is float)
  int weights_type;            // kWeightsF32 / kWeightsF16 / kWeightsBF16
  const int64_t* feat_woff;    // (F) element offset of feature f's table
  const int64_t* feat_dim;     // (F)
  const int64_t* feat_rows;    // (F)
  const int64_t* out_off;      // (F+1) output column offsets
  const void* indices;         // (N) int32 or int64 (index_is_64)
  const void* offsets;         // (F*B+1) same type as indices
  bool index_is_64;
  const float* psw;            // (N) per-sample weights or nullptr
  float* out;                  // (B, total_dim), or (N, dim) for kPoolNone; float for every weights_type
  unsigned long long* first_bad;  // (1) atomicMin of the first out-of-range position; preset to kNoError
  int64_t num_features, batch, num_indices, total_dim;
  int pooling;
  bool out_aligned;            // total_dim % 4 == 0 (pooled) — row starts of the output are 16-byte aligned
  int64_t max_dim;             // largest feature dim (v2 forward takes <= 256)
  bool v2_layout;              // v2 forward can run: see launch_forward_pooled in tbe_impl.cuh
  int variant;                 // 0 (v1) .. kFwdVariants-1, see above
  int num_sms;                 // multiprocessors (sizes v2's persistent grid)
};

// One launch for all features and bags.
cudaError_t forward(const ForwardArgs& a, cudaStream_t stream);

struct BackwardArgs {
  void* weights;               // flat weights of weights_type, updated in place (fp32 math,
                               // round-to-nearest-even stores for 16-bit types)
  int weights_type;
  float* momentum;             // (total_rows) rowwise Adagrad state, updated in place (unused for SGD)
  const int64_t* feat_rows;    // (F)
  const int64_t* feat_row_off; // (F) linear row id of row 0 of feature f's table
  const int64_t* out_off;      // (F+1)
  const int64_t* table_row_off;  // (T+1) linear row id offsets per table
  const int64_t* table_woff;   // (T)
  const int64_t* table_dim;    // (T)
  int64_t num_tables;
  const void* indices;         // (N)
  const void* offsets;         // (F*B+1)
  bool index_is_64;
  const float* psw;            // (N) or nullptr
  const float* grad_out;       // (B, total_dim) or (N, dim) for kPoolNone, contiguous
  int64_t num_features, batch, num_indices, total_dim, total_rows, max_dim;
  int pooling;
  bool grad_aligned;           // every gradient row start is 16-byte aligned (float4 loads)
  unsigned dim_classes;        // bit c set when some table has dim class c (see dim_class() in the .cu):
                               // c = (dim % 4 == 0 && grad_aligned ? 0 : 4) + (dim<=128 ? 0 : <=256 ? 1 : <=512 ? 2 : 3)
  unsigned dim_classes_v2;     // the same for the v2 row update (dim_class_v2() in tbe_impl.cuh), 13 classes
  int variant;                 // kBwdV1 .. kBwdV3Stream
  int optimizer;
  float lr, eps;
  int64_t* unique_ids;         // (N) out: sorted unique updated linear ids (entries after them untouched)
  int64_t* num_unique;         // (1) out: how many unique ids (device; no host sync)
  int num_sms;                 // multiprocessors, sizes the grid-stride launches
};

// Bytes of scratch memory backward(a, ...) needs (sizes, variant, weighted or not).
size_t backward_workspace_bytes(const BackwardArgs& a);

// Sort + segment reduce + one optimizer update per unique row. Deterministic: no float atomics;
// gradients of a row are summed in position order (chunks of kChunk, then the chunks in order).
cudaError_t backward(const BackwardArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace tbe
