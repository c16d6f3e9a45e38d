// Device code of the TBE kernels, templated on the weights' type (float, __half,
// __nv_bfloat16; accumulation is always float). Included by tbe_kernels.cu (the sort / scan /
// chunk-sum steps and the host API) and by tbe_kernels_f32.cu / tbe_kernels_f16.cu /
// tbe_kernels_bf16.cu (the forward and the row update for one weight type each, compiled in
// parallel). See tbe_kernels.cu for the algorithm.
#pragma once

#include "tbe_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

namespace tbe {
namespace detail {


constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kFwdLoads = 12;  // forward: float4 (or 4-float) row loads in flight per lane per step
constexpr int kBlock = kWarp * kWarpsPerBlock;
constexpr unsigned kFull = 0xffffffffu;

template <typename T>
__device__ __forceinline__ int64_t upper_bound(const T* a, int64_t n, int64_t v) {
  // first i in [0, n) with a[i] > v, else n
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (static_cast<int64_t>(a[mid]) <= v) lo = mid + 1; else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ int64_t min_i64(int64_t x, int64_t y) { return x < y ? x : y; }
__device__ __forceinline__ int64_t max_i64(int64_t x, int64_t y) { return x > y ? x : y; }

__device__ __forceinline__ float& comp(float4& v, int c) {
  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}
__device__ __forceinline__ float comp(const float4& v, int c) {
  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

// ---- weights of type T (float, __half, __nv_bfloat16) read and written as float ----------
template <typename T>
struct Cvt;
template <>
struct Cvt<float> {
  static __device__ __forceinline__ float to(float v) { return v; }
  static __device__ __forceinline__ float from(float v) { return v; }
};
template <>
struct Cvt<__half> {
  static __device__ __forceinline__ float to(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from(float v) { return __float2half_rn(v); }
};
template <>
struct Cvt<__nv_bfloat16> {
  static __device__ __forceinline__ float to(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
};

// 4 consecutive elements of type T as they sit in memory: a float4 for float, 8 bytes (uint2)
// for the 16-bit types. Loads return this raw form and the conversion to float is a separate
// step, so that a batch of loads is issued back to back and converted after: a conversion
// inside the load's branch made each 16-bit load wait for its data before the next was issued
// (the fp16 forward ran at half the fp32 one's speed, H200 2026-11-23).
template <typename T>
struct RawOf {
  using type = uint2;
};
template <>
struct RawOf<float> {
  using type = float4;
};
template <typename T>
using Raw4 = typename RawOf<T>::type;

template <typename T>
__device__ __forceinline__ Raw4<T> zero_raw4() {
  if constexpr (sizeof(T) == 4) return make_float4(0.f, 0.f, 0.f, 0.f); else return make_uint2(0u, 0u);
}

// Cache policy of a load (the kLdg parameter of the loads below): kPlain; kLdg: through the
// read-only cache (only for data no kernel of this launch writes); kStream: "evict first"
// (ld.global.cs), for data used once, so that it does not push reused lines out of L2.
constexpr int kPlain = 0;
constexpr int kLdgCache = 1;
constexpr int kStream = 2;

// 4 consecutive elements at p (16-byte aligned for float, 8-byte for 16-bit types), raw
template <int kLdg, typename T>
__device__ __forceinline__ Raw4<T> load_raw4(const T* p) {
  const Raw4<T>* q = reinterpret_cast<const Raw4<T>*>(p);
  if constexpr (kLdg == kLdgCache) return __ldg(q);
  else if constexpr (kLdg == kStream) return __ldcs(q);
  else return *q;
}

template <typename T>
__device__ __forceinline__ float4 to_float4(const Raw4<T>& r) {
  if constexpr (sizeof(T) == 4) {
    return r;
  } else {
    const T* h = reinterpret_cast<const T*>(&r);
    return make_float4(Cvt<T>::to(h[0]), Cvt<T>::to(h[1]), Cvt<T>::to(h[2]), Cvt<T>::to(h[3]));
  }
}

template <int kLdg, typename T>
__device__ __forceinline__ float4 load4(const T* p) {
  return to_float4<T>(load_raw4<kLdg>(p));
}

template <int kLdg, typename T>
__device__ __forceinline__ float load1(const T* p) {
  if constexpr (kLdg == kLdgCache) return Cvt<T>::to(__ldg(p)); else return Cvt<T>::to(*p);
}

// round to nearest even when T is a 16-bit type; kStream: st.global.cs (evict first)
template <typename T, bool kStreamStore = false>
__device__ __forceinline__ void store4(T* p, const float4& v) {
  if constexpr (sizeof(T) == 4) {
    if constexpr (kStreamStore) __stcs(reinterpret_cast<float4*>(p), v); else *reinterpret_cast<float4*>(p) = v;
  } else {
    alignas(8) T h[4] = {Cvt<T>::from(v.x), Cvt<T>::from(v.y), Cvt<T>::from(v.z), Cvt<T>::from(v.w)};
    const uint2 raw = *reinterpret_cast<const uint2*>(h);
    if constexpr (kStreamStore) __stcs(reinterpret_cast<uint2*>(p), raw); else *reinterpret_cast<uint2*>(p) = raw;
  }
}

// L2 prefetch of the 128-byte lines of [p, p + bytes) this lane issues: lines lane0, lane0 + step,
// ... (prefetch.global.L2: no register, no scoreboard; the later load finds the line in L2).
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes, int lane0, int step) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{127};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t a = first + 128 * static_cast<uintptr_t>(lane0); a < end; a += 128 * static_cast<uintptr_t>(step)) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
  }
}

// Lane-to-element mapping shared by every kernel. A lane (index l within a group of G lanes)
// owns kW "units" u = 0..kW-1. Vector mode: unit u is the float4 at elements 4*(l + G*u) ..+3.
// Scalar mode (G == 32): component c of unit u is element l + 32*(4*u + c).
template <int G, bool kVec>
__device__ __forceinline__ int elem(int l, int u, int c) {
  return kVec ? 4 * (l + G * u) + c : l + kWarp * (4 * u + c);
}

template <int G, int kW, bool kVec, int kLdg = kLdgCache, typename T = float>
__device__ __forceinline__ void load_units(const T* __restrict__ row, int dim, int l, float4 (&v)[kW]) {
#pragma unroll
  for (int u = 0; u < kW; ++u) {
    v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (kVec) {
      if (elem<G, kVec>(l, u, 0) < dim) v[u] = load4<kLdg>(row + elem<G, kVec>(l, u, 0));
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int e = elem<G, kVec>(l, u, c);
        if (e < dim) comp(v[u], c) = load1<kLdg>(row + e);
      }
    }
  }
}

// A row's units in the raw form (vector mode only); elements past dim read as zeros.
template <int G, int kW, int kLdg, typename T>
__device__ __forceinline__ void load_units_raw(const T* __restrict__ row, int dim, int l, Raw4<T> (&r)[kW]) {
#pragma unroll
  for (int u = 0; u < kW; ++u) {
    r[u] = zero_raw4<T>();
    if (elem<G, true>(l, u, 0) < dim) r[u] = load_raw4<kLdg>(row + elem<G, true>(l, u, 0));
  }
}

// A unit as loaded: raw (vector mode) or already float (scalar mode, element by element).
template <bool kVec, typename T>
using Unit = std::conditional_t<kVec, Raw4<T>, float4>;

template <bool kVec, typename T>
__device__ __forceinline__ Unit<kVec, T> zero_unit() {
  if constexpr (kVec) return zero_raw4<T>(); else return make_float4(0.f, 0.f, 0.f, 0.f);
}

template <bool kVec, typename T>
__device__ __forceinline__ float4 unit_to_float4(const Unit<kVec, T>& x) {
  if constexpr (kVec) return to_float4<T>(x); else return x;
}

template <int G, int kW, bool kVec, int kLdg, typename T>
__device__ __forceinline__ void load_units_any(const T* __restrict__ row, int dim, int l, Unit<kVec, T> (&r)[kW]) {
  if constexpr (kVec) load_units_raw<G, kW, kLdg, T>(row, dim, l, r); else load_units<G, kW, kVec, kLdg, T>(row, dim, l, r);
}

template <int G, int kW, bool kVec, typename T = float, bool kStreamStore = false>
__device__ __forceinline__ void store_units(T* row, int dim, int l, const float4 (&v)[kW], bool vec_store) {
#pragma unroll
  for (int u = 0; u < kW; ++u) {
    if (kVec && vec_store) {
      if (elem<G, kVec>(l, u, 0) < dim) store4<T, kStreamStore>(row + elem<G, kVec>(l, u, 0), v[u]);
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int e = elem<G, kVec>(l, u, c);
        if (e < dim) row[e] = Cvt<T>::from(comp(v[u], c));
      }
    }
  }
}

// ------------------------------------------------------------------------------------ forward

// kUnroll rows of the 32 whose indices/weights lane i holds, starting at row r0, into acc
// (group g takes rows r0 + g + P*r; rows >= n are skipped).
template <typename WeightT, int G, int kW, bool kVec, int kUnroll, typename PosT>
__device__ __forceinline__ void pool_step(const WeightT* __restrict__ table, int dim, PosT my_idx, float my_w,
                                          int n, int r0, int lane, float4 (&acc)[kW]) {
  constexpr int P = kWarp / G;  // rows in flight per warp per unroll step
  const int g = lane / G;
  const int l = lane % G;
  PosT ridx[kUnroll];
  float rw[kUnroll];
#pragma unroll
  for (int r = 0; r < kUnroll; ++r) {
    const int j = r0 + g + P * r;  // which of the 32 rows this group takes
    const int src = j < kWarp ? j : 0;
    const PosT idx = __shfl_sync(kFull, my_idx, src);
    rw[r] = __shfl_sync(kFull, my_w, src);
    ridx[r] = j < n ? idx : -1;
  }
  // every load of the step is issued before any conversion (see Raw4)
  Unit<kVec, WeightT> v[kUnroll][kW];
#pragma unroll
  for (int r = 0; r < kUnroll; ++r) {
    if (ridx[r] >= 0) {
      load_units_any<G, kW, kVec, kLdgCache, WeightT>(table + static_cast<int64_t>(ridx[r]) * dim, dim, l, v[r]);
    } else {
#pragma unroll
      for (int u = 0; u < kW; ++u) v[r][u] = zero_unit<kVec, WeightT>();
    }
  }
#pragma unroll
  for (int r = 0; r < kUnroll; ++r) {
#pragma unroll
    for (int u = 0; u < kW; ++u) {
      const float4 x = unit_to_float4<kVec, WeightT>(v[r][u]);
      acc[u].x = fmaf(rw[r], x.x, acc[u].x);
      acc[u].y = fmaf(rw[r], x.y, acc[u].y);
      acc[u].z = fmaf(rw[r], x.z, acc[u].z);
      acc[u].w = fmaf(rw[r], x.w, acc[u].w);
    }
  }
}

// Pool up to 32 rows of one bag whose indices/weights lane i holds (my_idx < 0: skipped) into
// acc. The warp splits into P = 32/G groups of G lanes; group g takes rows g, g+P, g+2P, ...
// in order, kUnroll rows per step (kUnroll*kW float4 loads in flight per lane). The order of
// the additions depends only on G (not on kUnroll): every forward variant sums alike.
// kRolled: the step loop is not unrolled, so that kUnroll alone sets the loads in flight (v2).
template <typename WeightT, int G, int kW, bool kVec, int kUnroll, bool kRolled, typename PosT>
__device__ __forceinline__ void pool_chunk(const WeightT* __restrict__ table, int dim, PosT my_idx, float my_w,
                                           int n, int lane, float4 (&acc)[kW], bool l2_prefetch) {
  constexpr int kStep = kWarp / G * kUnroll;
  if (l2_prefetch && lane >= kStep && my_idx >= 0) {  // rows past the first batch: in L2 when reached
    prefetch_l2(table + static_cast<int64_t>(my_idx) * dim, static_cast<int64_t>(dim) * sizeof(WeightT), 0, 1);
  }
  if constexpr (kRolled) {
#pragma unroll 1
    for (int r0 = 0; r0 < n; r0 += kStep) pool_step<WeightT, G, kW, kVec, kUnroll, PosT>(table, dim, my_idx, my_w, n, r0, lane, acc);
  } else {
    for (int r0 = 0; r0 < n; r0 += kStep) pool_step<WeightT, G, kW, kVec, kUnroll, PosT>(table, dim, my_idx, my_w, n, r0, lane, acc);
  }
}

// Index (and weight) of position jj of a bag for this lane; an out-of-range index flags the
// bag (bad) and records the position (atomicMin into first_bad); it is then skipped (-1).
// PosT: int64_t, or int32_t where positions and rows fit (v2).
template <typename IndexT, typename PosT>
__device__ __forceinline__ void fetch_index(const IndexT* __restrict__ indices, const float* __restrict__ psw,
                                            PosT jj, PosT end, int64_t rows, unsigned long long* first_bad,
                                            PosT& my_idx, float& my_w, bool& bad) {
  my_idx = -1;
  my_w = 0.f;
  if (jj < end) {
    const int64_t idx = static_cast<int64_t>(indices[jj]);
    if (idx < 0 || idx >= rows) {
      bad = true;
      atomicMin(first_bad, static_cast<unsigned long long>(jj));
    } else {
      my_idx = static_cast<PosT>(idx);
      my_w = psw != nullptr ? psw[jj] : 1.f;
    }
  }
}

// Combine the P groups' partial sums (fixed butterfly order), NaN for a bag with a bad index,
// divide by the length for MEAN, store (group 0).
template <int G, int kW, bool kVec>
__device__ __forceinline__ void finish_bag(float4 (&acc)[kW], bool bad, bool mean, int64_t len, float* out_row,
                                           int dim, bool out_vec, int lane) {
#pragma unroll
  for (int off = kWarp / 2; off >= G; off >>= 1) {
#pragma unroll
    for (int u = 0; u < kW; ++u) {
      acc[u].x += __shfl_xor_sync(kFull, acc[u].x, off);
      acc[u].y += __shfl_xor_sync(kFull, acc[u].y, off);
      acc[u].z += __shfl_xor_sync(kFull, acc[u].z, off);
      acc[u].w += __shfl_xor_sync(kFull, acc[u].w, off);
    }
  }
  bad = __any_sync(kFull, bad);
  if (lane / G != 0) return;
  if (bad) {
    const float nan = __int_as_float(0x7fc00000);
#pragma unroll
    for (int u = 0; u < kW; ++u) acc[u] = make_float4(nan, nan, nan, nan);
  } else if (mean && len > 0) {
    const float flen = static_cast<float>(len);
#pragma unroll
    for (int u = 0; u < kW; ++u) {
      acc[u].x = __fdiv_rn(acc[u].x, flen);
      acc[u].y = __fdiv_rn(acc[u].y, flen);
      acc[u].z = __fdiv_rn(acc[u].z, flen);
      acc[u].w = __fdiv_rn(acc[u].w, flen);
    }
  }
  store_units<G, kW, kVec>(out_row, dim, lane % G, acc, out_vec);
}

// Pool one bag [start, end): the warp reads 32 indices at once (lane i: position base+i), then
// pool_chunk. first_idx/first_w: the first 32 already fetched (v2 prefetches them), or
// have_first = false to fetch them here.
template <typename IndexT, typename WeightT, int G, int kW, bool kVec, int kLoads, bool kRolled, typename PosT>
__device__ __forceinline__ void pool_bag(const WeightT* __restrict__ table, int64_t rows, int dim,
                                         const IndexT* __restrict__ indices, const float* __restrict__ psw,
                                         PosT start, PosT end, float* out_row, bool out_vec, bool mean,
                                         unsigned long long* first_bad, int lane, bool have_first, PosT first_idx,
                                         float first_w, bool first_bad_flag, bool l2_prefetch = false) {
  // rows per group per step: kLoads float4 loads in flight per lane (v2: kLoads 16-byte loads'
  // worth, so twice the rows for 16-bit weights, whose lanes read 8 bytes), and no more rows than
  // the 32 whose indices the warp holds
  constexpr int kLoadsT = kRolled && kVec ? kLoads * 4 / static_cast<int>(sizeof(WeightT)) : kLoads;
  constexpr int kPerW = kLoadsT / kW > 0 ? kLoadsT / kW : 1;
  constexpr int kUnroll = kPerW < G ? kPerW : G;
  bool bad = have_first && first_bad_flag;
  float4 acc[kW];
#pragma unroll
  for (int u = 0; u < kW; ++u) acc[u] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (PosT base = start; base < end; base += kWarp) {
    PosT my_idx = first_idx;
    float my_w = first_w;
    if (!(have_first && base == start)) {
      fetch_index<IndexT, PosT>(indices, psw, base + lane, end, rows, first_bad, my_idx, my_w, bad);
    }
    const int n = static_cast<int>(min_i64(kWarp, end - base));
    pool_chunk<WeightT, G, kW, kVec, kUnroll, kRolled, PosT>(table, dim, my_idx, my_w, n, lane, acc, l2_prefetch);
  }
  finish_bag<G, kW, kVec>(acc, bad, mean, end - start, out_row, dim, out_vec, lane);
}

// v1: one warp per bag (bag = blockIdx.x * 8 + warp), 12 row loads in flight per lane.
template <typename IndexT, typename WeightT>
__global__ void __launch_bounds__(kBlock) pooled_forward_kernel(ForwardArgs a) {
  const int lane = threadIdx.x % kWarp;
  const int64_t bag = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (bag >= a.num_features * a.batch) return;  // whole warp leaves together
  const int64_t f = bag / a.batch;
  const int64_t b = bag - f * a.batch;
  const IndexT* offsets = static_cast<const IndexT*>(a.offsets);
  const IndexT* indices = static_cast<const IndexT*>(a.indices);
  // offsets are not validated on the device; clamping keeps malformed ones from reading
  // outside indices[0, N)
  const int64_t start = min_i64(max_i64(static_cast<int64_t>(offsets[bag]), 0), a.num_indices);
  const int64_t end = min_i64(max_i64(static_cast<int64_t>(offsets[bag + 1]), start), a.num_indices);
  const int dim = static_cast<int>(a.feat_dim[f]);
  const int64_t rows = a.feat_rows[f];
  const WeightT* table = static_cast<const WeightT*>(a.weights) + a.feat_woff[f];
  const int64_t col = a.out_off[f];
  float* out_row = a.out + b * a.total_dim + col;
  const bool mean = a.pooling == kPoolMean;
  const bool vec = dim % 4 == 0;
  const bool out_vec = a.out_aligned && col % 4 == 0;
#define TBE_POOL(G, KW, VEC)                                                                                    \
  pool_bag<IndexT, WeightT, G, KW, VEC, kFwdLoads, false, int64_t>(table, rows, dim, indices, a.psw, start, end, out_row, out_vec, \
                                                   mean, a.first_bad, lane, false, -1, 0.f, false)
  if (vec) {  // G lanes per row, kW float4 per lane
    const int units = dim / 4;
    if (units <= 1) TBE_POOL(1, 1, true);
    else if (units <= 2) TBE_POOL(2, 1, true);
    else if (units <= 4) TBE_POOL(4, 1, true);
    else if (units <= 8) TBE_POOL(8, 1, true);
    else if (units <= 16) TBE_POOL(16, 1, true);
    else if (units <= 32) TBE_POOL(32, 1, true);
    else if (units <= 64) TBE_POOL(32, 2, true);
    else if (units <= 128) TBE_POOL(32, 4, true);
    else TBE_POOL(32, 8, true);
  } else {  // 32 lanes, scalar loads
    if (dim <= 128) TBE_POOL(32, 1, false);
    else if (dim <= 256) TBE_POOL(32, 2, false);
    else if (dim <= 512) TBE_POOL(32, 4, false);
    else TBE_POOL(32, 8, false);
  }
#undef TBE_POOL
}

// v2: persistent warps (grid = one wave), warp w pools bags w, w+W, w+2W, ... While it pools
// one bag, the next bag's first 32 indices/weights (and the bag after next's offsets) are
// already in flight: the two dependent loads that start a bag (offsets, then indices) leave
// the critical path. One (G, kW) for every feature: the one v1 takes for each of them (the host
// checks), so both add in the same order. kLoads row loads in flight per lane, kMinBlocks blocks
// of 8 warps per SM.
template <typename IndexT, typename WeightT, int kLoads, int kMinBlocks, int G, int kW>
__global__ void __launch_bounds__(kBlock, kMinBlocks) pooled_forward_v2_kernel(ForwardArgs a) {
  const int lane = threadIdx.x % kWarp;
  const int32_t num_bags = static_cast<int32_t>(a.num_features * a.batch);
  const int32_t warps = static_cast<int32_t>(gridDim.x) * kWarpsPerBlock;
  const int32_t batch = static_cast<int32_t>(a.batch);
  int32_t bag = static_cast<int32_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (bag >= num_bags) return;  // whole warp leaves together
  const IndexT* offsets = static_cast<const IndexT*>(a.offsets);
  const IndexT* indices = static_cast<const IndexT*>(a.indices);
  const bool mean = a.pooling == kPoolMean;
  const bool l2_prefetch = fwd_l2_prefetch(a.variant);
  const int32_t n_idx = static_cast<int32_t>(a.num_indices);
  auto bounds = [&](int32_t q, int32_t& s, int32_t& e) {  // clamped like v1
    s = static_cast<int32_t>(min_i64(max_i64(static_cast<int64_t>(offsets[q]), 0), n_idx));
    e = static_cast<int32_t>(min_i64(max_i64(static_cast<int64_t>(offsets[q + 1]), s), n_idx));
  };
  int32_t start, end, next_start = 0, next_end = 0;
  bounds(bag, start, end);
  if (bag < num_bags - warps) bounds(bag + warps, next_start, next_end);
  int32_t f = bag / batch;
  int32_t cur_idx;
  float cur_w;
  bool cur_bad = false;
  fetch_index<IndexT, int32_t>(indices, a.psw, start + lane, end, a.feat_rows[f], a.first_bad, cur_idx, cur_w, cur_bad);
  while (true) {
    const bool more = bag < num_bags - warps;
    const int32_t next = bag + (more ? warps : 0);
    // in flight while this bag is pooled: the next bag's first indices, the one after's offsets
    int32_t nidx = -1;
    int32_t after_start = 0, after_end = 0, nf = 0;
    float nw = 0.f;
    bool nbad = false;
    if (more) {
      nf = next / batch;
      fetch_index<IndexT, int32_t>(indices, a.psw, next_start + lane, next_end, a.feat_rows[nf], a.first_bad, nidx, nw,
                                   nbad);
      if (next < num_bags - warps) bounds(next + warps, after_start, after_end);
    }
    const int dim = static_cast<int>(a.feat_dim[f]);
    const int64_t col = a.out_off[f];
    float* out_row = a.out + static_cast<int64_t>(bag - f * batch) * a.total_dim + col;
    pool_bag<IndexT, WeightT, G, kW, true, kLoads, true, int32_t>(static_cast<const WeightT*>(a.weights) + a.feat_woff[f],
                                                   a.feat_rows[f], dim, indices, a.psw, start, end, out_row, true, mean,
                                                   a.first_bad, lane, true, cur_idx, cur_w, cur_bad, l2_prefetch);
    if (!more) break;
    bag = next;
    f = nf;
    start = next_start;
    end = next_end;
    next_start = after_start;
    next_end = after_end;
    cur_idx = nidx;
    cur_w = nw;
    cur_bad = nbad;
  }
}

// v3 forward, occupancy first (configs >= kFwdFirstLite: FBGEMM's forward runs ~51 warps/SM with
// 32 registers): one warp per bag like v1, but one (G, kW) for every feature (v2's layouts),
// 32-bit positions, kLoads row loads in flight per lane and no prefetch of the next bag (its
// state cost the persistent kernel ~20 registers), so that kMinBlocks blocks of 8 warps fit.
template <typename IndexT, typename WeightT, int kLoads, int kMinBlocks, int G, int kW>
__global__ void __launch_bounds__(kBlock, kMinBlocks) pooled_forward_lite_kernel(ForwardArgs a) {
  const int lane = threadIdx.x % kWarp;
  const int32_t bag = static_cast<int32_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (bag >= static_cast<int32_t>(a.num_features * a.batch)) return;  // whole warp leaves together
  const int32_t batch = static_cast<int32_t>(a.batch);
  const int32_t f = bag / batch;
  const IndexT* offsets = static_cast<const IndexT*>(a.offsets);
  const int32_t n_idx = static_cast<int32_t>(a.num_indices);
  const int32_t start = static_cast<int32_t>(min_i64(max_i64(static_cast<int64_t>(offsets[bag]), 0), n_idx));
  const int32_t end = static_cast<int32_t>(min_i64(max_i64(static_cast<int64_t>(offsets[bag + 1]), start), n_idx));
  float* out_row = a.out + static_cast<int64_t>(bag - f * batch) * a.total_dim + a.out_off[f];
  pool_bag<IndexT, WeightT, G, kW, true, kLoads, true, int32_t>(
      static_cast<const WeightT*>(a.weights) + a.feat_woff[f], a.feat_rows[f], static_cast<int>(a.feat_dim[f]),
      static_cast<const IndexT*>(a.indices), a.psw, start, end, out_row, true, a.pooling == kPoolMean, a.first_bad,
      lane, false, -1, 0.f, false);
}

template <typename IndexT, typename WeightT>
__global__ void __launch_bounds__(kBlock) nobag_forward_kernel(ForwardArgs a, int dim, bool vec) {
  const WeightT* weights = static_cast<const WeightT*>(a.weights);
  const IndexT* offsets = static_cast<const IndexT*>(a.offsets);
  const IndexT* indices = static_cast<const IndexT*>(a.indices);
  const int64_t units = vec ? dim / 4 : dim;
  const int64_t total = a.num_indices * units;
  const int64_t nf = a.num_features;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = t / units;
    const int64_t u = t - p * units;
    // feature of position p: the last f with offsets[f*B] <= p
    int64_t lo = 0, hi = nf - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) >> 1;
      if (static_cast<int64_t>(offsets[mid * a.batch]) <= p) lo = mid; else hi = mid - 1;
    }
    const int64_t idx = static_cast<int64_t>(indices[p]);
    const bool bad = idx < 0 || idx >= a.feat_rows[lo];
    if (bad && u == 0) atomicMin(a.first_bad, static_cast<unsigned long long>(p));
    const float w = a.psw != nullptr ? a.psw[p] : 1.f;
    const float nan = __int_as_float(0x7fc00000);
    if (vec) {
      float4 v = make_float4(nan, nan, nan, nan);
      if (!bad) {
        v = load4<kLdgCache>(weights + a.feat_woff[lo] + idx * dim + 4 * u);
        if (a.psw != nullptr) { v.x *= w; v.y *= w; v.z *= w; v.w *= w; }
      }
      reinterpret_cast<float4*>(a.out + p * dim)[u] = v;
    } else {
      float v = nan;
      if (!bad) {
        v = load1<kLdgCache>(weights + a.feat_woff[lo] + idx * dim + u);
        if (a.psw != nullptr) v *= w;
      }
      a.out[p * dim + u] = v;
    }
  }
}

// ------------------------------------------------------------------------------------ backward

// v1 step (1): linear row id (sort key) and bag of every index position, one thread per position
// (its bag by binary search over the offsets); invalid indices get total_rows.
template <typename IndexT>
__global__ void __launch_bounds__(kBlock) linearize_kernel(BackwardArgs a, int64_t* keys, int32_t* positions,
                                                           int32_t* bag_of) {
  const IndexT* offsets = static_cast<const IndexT*>(a.offsets);
  const IndexT* indices = static_cast<const IndexT*>(a.indices);
  const int64_t num_bags = a.num_features * a.batch;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < a.num_indices;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bag = min_i64(max_i64(upper_bound(offsets, num_bags + 1, p) - 1, 0), num_bags - 1);
    const int64_t f = bag / a.batch;
    const int64_t idx = static_cast<int64_t>(indices[p]);
    const bool ok = idx >= 0 && idx < a.feat_rows[f];
    keys[p] = ok ? a.feat_row_off[f] + idx : a.total_rows;
    positions[p] = static_cast<int32_t>(p);
    bag_of[p] = static_cast<int32_t>(bag);
  }
}

// v2 step (1): the warp takes 32 bags (lane i: bag base+i reads its offsets once), then writes
// the keys of each bag's positions (coalesced, no binary search). The sorted value is what the
// update needs to find a position's gradient row in one load: the bag (pooled), the bag and
// the per-sample weight's bits (pooled, weighted: vals64), or the position (NONE). Keys of
// invalid indices are all ones (sorted last, one run); positions in no bag (malformed offsets)
// keep the all-ones the workspace was filled with, so they are never trained (nor read by the
// forward).
template <typename IndexT, typename KeyT>
__global__ void __launch_bounds__(kBlock) linearize_v2_kernel(BackwardArgs a, KeyT* keys, int32_t* vals,
                                                              uint64_t* vals64) {
  const IndexT* offsets = static_cast<const IndexT*>(a.offsets);
  const IndexT* indices = static_cast<const IndexT*>(a.indices);
  const int lane = threadIdx.x % kWarp;
  const int64_t num_bags = a.num_features * a.batch;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const bool none = a.pooling == kPoolNone;
  const KeyT invalid = ~KeyT{0};
  for (int64_t base = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp) * kWarp;
       base < num_bags; base += warps * kWarp) {
    const int64_t my_bag = base + lane;
    int64_t my_start = 0, my_end = 0, my_row_off = 0, my_rows = 0;
    if (my_bag < num_bags) {
      const int64_t f = my_bag / a.batch;
      my_start = min_i64(max_i64(static_cast<int64_t>(offsets[my_bag]), 0), a.num_indices);
      my_end = min_i64(max_i64(static_cast<int64_t>(offsets[my_bag + 1]), my_start), a.num_indices);
      my_row_off = a.feat_row_off[f];
      my_rows = a.feat_rows[f];
    }
    for (int j = 0; j < kWarp; ++j) {
      const int64_t start = __shfl_sync(kFull, my_start, j);
      const int64_t end = __shfl_sync(kFull, my_end, j);
      const int64_t row_off = __shfl_sync(kFull, my_row_off, j);
      const int64_t rows = __shfl_sync(kFull, my_rows, j);
      const uint32_t bag = static_cast<uint32_t>(base + j);
      for (int64_t p = start + lane; p < end; p += kWarp) {
        const int64_t idx = static_cast<int64_t>(indices[p]);
        keys[p] = idx >= 0 && idx < rows ? static_cast<KeyT>(row_off + idx) : invalid;
        if (vals64 != nullptr) vals64[p] = (static_cast<uint64_t>(bag) << 32) | __float_as_uint(a.psw[p]);
        else vals[p] = static_cast<int32_t>(none ? p : static_cast<int64_t>(bag));
      }
    }
  }
}

struct Scratch {
  void* keys_in;       // int64_t (v1) or KeyT (v2) linear ids; v2 reuses it for the unique ids
  void* keys_out;
  int32_t* pos_in;
  int32_t* pos_out;    // sorted values: index positions (v1); bags, or positions for NONE (v2)
  int32_t* bag_of;     // v1: bag of each position
  uint64_t* vals64_in;   // v2, weighted pooling: (bag << 32 | weight bits) of each position
  uint64_t* vals64_out;  // ... sorted (else nullptr)
  bool v2;             // the sorted values are v2's (see linearize_v2_kernel)
  int32_t* counts;     // (U) positions per unique id
  int32_t* seg_start;  // (U) first sorted position of each unique id
  int32_t* nchunks;    // (U) chunks of each long segment
  int32_t* chunk_off;  // (U) first chunk of each long segment
  float* partials;     // (max_chunks, dim_stride) chunk sums
  int64_t dim_stride;
  void* cub_temp;
  size_t cub_bytes;
};

// Where the gradient row of sorted position q starts in grad_out (element offset), its bag's
// length (MEAN) and per-sample weight. v1: position -> bag_of[position] (two dependent loads);
// v2: the sorted value is the bag (and weight) itself.
struct GradRef {
  int64_t src;
  float len, w;
};

// v2 values of positions in no bag (malformed offsets: never trained, see linearize_v2_kernel)
// are not written; a window may still read them, so they are clamped into range.
template <typename IndexT>
__device__ __forceinline__ GradRef grad_ref(const BackwardArgs& a, const Scratch& s, int64_t q, int dim) {
  GradRef r{0, 1.f, 1.f};
  int64_t bag;
  if (a.pooling == kPoolNone) {
    const int64_t p = min_i64(static_cast<uint32_t>(s.pos_out[q]), a.num_indices - 1);
    r.src = p * dim;
    if (a.psw != nullptr) r.w = a.psw[p];
    return r;
  }
  if (!s.v2) {
    const int64_t p = s.pos_out[q];
    bag = s.bag_of[p];
    if (a.psw != nullptr) r.w = a.psw[p];
  } else if (s.vals64_out != nullptr) {
    const uint64_t v = s.vals64_out[q];
    bag = static_cast<int64_t>(v >> 32);
    r.w = __uint_as_float(static_cast<uint32_t>(v));
  } else {
    bag = static_cast<uint32_t>(s.pos_out[q]);
  }
  bag = min_i64(bag, a.num_features * a.batch - 1);
  const uint32_t f = static_cast<uint32_t>(bag) / static_cast<uint32_t>(a.batch);
  const int64_t b = bag - static_cast<int64_t>(f) * a.batch;
  r.src = b * a.total_dim + a.out_off[f];
  if (a.pooling == kPoolMean) {
    const IndexT* offsets = static_cast<const IndexT*>(a.offsets);
    r.len = static_cast<float>(static_cast<int64_t>(offsets[bag + 1]) - static_cast<int64_t>(offsets[bag]));
  }
  return r;
}

// The gradient row at grad_out + src (this lane's elements) into v (ok == false: nothing is
// read, v = 0).
template <int G, int kW, bool kVec>
__device__ __forceinline__ void load_grad(const BackwardArgs& a, int64_t src, bool ok, int dim, int l,
                                          float4 (&v)[kW]) {
  if (ok) {
    load_units<G, kW, kVec>(a.grad_out + src, dim, l, v);
  } else {
#pragma unroll
    for (int u = 0; u < kW; ++u) v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// acc += v / len for MEAN, * w when weighted (ok == false: nothing is added). IEEE-rounded ops,
// no contraction: the reference's order of operations.
template <int kW>
__device__ __forceinline__ void accum_grad(const BackwardArgs& a, float4 (&v)[kW], float len, float w, bool ok,
                                           float4 (&acc)[kW]) {
  const bool mean = a.pooling == kPoolMean;
#pragma unroll
  for (int u = 0; u < kW; ++u) {
    if (mean) {
      v[u].x = __fdiv_rn(v[u].x, len); v[u].y = __fdiv_rn(v[u].y, len);
      v[u].z = __fdiv_rn(v[u].z, len); v[u].w = __fdiv_rn(v[u].w, len);
    }
    if (a.psw != nullptr) {
      v[u].x = __fmul_rn(v[u].x, w); v[u].y = __fmul_rn(v[u].y, w);
      v[u].z = __fmul_rn(v[u].z, w); v[u].w = __fmul_rn(v[u].w, w);
    }
    if (ok) {
      acc[u].x = __fadd_rn(acc[u].x, v[u].x); acc[u].y = __fadd_rn(acc[u].y, v[u].y);
      acc[u].z = __fadd_rn(acc[u].z, v[u].z); acc[u].w = __fadd_rn(acc[u].w, v[u].w);
    }
  }
}

// Gradient rows summed per batch in v3: kB rows' loads issued back to back, then added in order
// (the same operations in the same order as one row at a time, more loads in flight; one row at
// a time, a row's add waited for its load before the load two rows on could reuse the
// registers). kB: 4 rows for one float4 per lane (2 for groups narrower than the warp, whose
// 4-row batches spilled 96 bytes at 64 registers), 2 rows for two float4, else 1.
template <int G, int kW>
__host__ __device__ constexpr int grad_batch() {
  return kW == 1 ? (G == kWarp ? 4 : 2) : kW == 2 ? 2 : 1;
}

// acc += the gradient rows of positions j = 0 .. n-1 (n warp-uniform) whose GradRef lane
// src_lane(j) of ref holds, in order of j (ok(j) == false: not added); kB rows per batch (see
// grad_batch; kB == 1: one at a time, the v1/v2 code).
template <int G, int kW, bool kVec, int kB, typename SrcLane, typename Ok>
__device__ __forceinline__ void add_grads(const BackwardArgs& a, const GradRef& ref, int n, SrcLane src_lane, Ok ok,
                                          int dim, int l, float4 (&acc)[kW]) {
  if constexpr (kB == 1) {
#pragma unroll 4
    for (int j = 0; j < n; ++j) {
      const int sl = src_lane(j);
      const int64_t src = __shfl_sync(kFull, ref.src, sl);
      const float len = __shfl_sync(kFull, ref.len, sl);
      const float w = __shfl_sync(kFull, ref.w, sl);
      float4 v[kW];
      const bool okj = ok(j);
      load_grad<G, kW, kVec>(a, src, okj, dim, l, v);
      accum_grad<kW>(a, v, len, w, okj, acc);
    }
  } else {
    for (int j0 = 0; j0 < n; j0 += kB) {
      float4 v[kB][kW];
      float len[kB], w[kB];
      bool okb[kB];
#pragma unroll
      for (int b = 0; b < kB; ++b) {  // every lane runs every shuffle (j0 + b >= n: not added)
        const int sl = src_lane(j0 + b);
        const int64_t src = __shfl_sync(kFull, ref.src, sl);
        len[b] = __shfl_sync(kFull, ref.len, sl);
        w[b] = __shfl_sync(kFull, ref.w, sl);
        okb[b] = j0 + b < n && ok(j0 + b);
        load_grad<G, kW, kVec>(a, src, okb[b], dim, l, v[b]);
      }
#pragma unroll
      for (int b = 0; b < kB; ++b) accum_grad<kW>(a, v[b], len[b], w[b], okb[b], acc);
    }
  }
}

// Sum the gradient rows of sorted positions [q0, q1) into acc, in order, for each group of G
// lanes of the warp (its own row and range; active == false: the group adds nothing). span =
// the longest range of the warp's groups (a warp-uniform trip count). Gradient of a position =
// grad_out row of its bag (or of the position for NONE), / bag length for MEAN, * per-sample
// weight: exactly reference.index_gradients, with IEEE-rounded ops (no contraction). The group
// fetches the bookkeeping of G positions at once (lane l: position q_base + l), then walks them
// in order, broadcasting each with a shuffle.
template <typename IndexT, int G, int kW, bool kVec, int kB = 1>
__device__ __forceinline__ void sum_grads(const BackwardArgs& a, const Scratch& s, bool active, int64_t q0, int64_t q1,
                                          int64_t span, int dim, int lane, float4 (&acc)[kW]) {
  const int g0 = lane / G * G;  // first lane of this group
  const int l = lane % G;
  for (int64_t qb = 0; qb < span; qb += G) {
    const int64_t q = q0 + qb + l;
    GradRef r{0, 1.f, 1.f};
    if (active && q < q1) r = grad_ref<IndexT>(a, s, q, dim);
    const int n = static_cast<int>(min_i64(G, span - qb));
    add_grads<G, kW, kVec, kB>(
        a, r, n, [&](int j) { return g0 + (j & (G - 1)); }, [&](int j) { return active && q0 + qb + j < q1; }, dim,
        l, acc);
  }
}

// The bookkeeping (GradRef) of G consecutive sorted positions [q0, q0 + G), lane l of a group
// holding position q0 + l. The rows of a tile are consecutive in sorted order, so one window
// serves several short rows: their gradient rows are then one load away instead of two.
struct Window {
  int64_t q0;  // first position (-1: empty)
  GradRef ref;
};

// Rows of at most G positions: acc += their gradient rows in order, from the group's window
// (reloaded at q0 when [q0, q1) is not inside it). fits == false: the group adds nothing here.
template <typename IndexT, int G, int kW, bool kVec, int kB = 1>
__device__ __forceinline__ void sum_grads_window(const BackwardArgs& a, const Scratch& s, bool fits, int64_t q0,
                                                 int64_t q1, int32_t span, int dim, int lane, Window& win,
                                                 float4 (&acc)[kW]) {
  const int g0 = lane / G * G;
  const int l = lane % G;
  if (fits && !(q0 >= win.q0 && q1 <= win.q0 + G && win.q0 >= 0)) {
    win.q0 = q0;
    win.ref = GradRef{0, 1.f, 1.f};
    if (q0 + l < a.num_indices) win.ref = grad_ref<IndexT>(a, s, q0 + l, dim);
  }
  const int off = fits ? static_cast<int>(q0 - win.q0) : 0;
  add_grads<G, kW, kVec, kB>(
      a, win.ref, span, [&](int j) { return g0 + ((off + j) & (G - 1)); },
      [&](int j) { return fits && j < q1 - q0; }, dim, l, acc);
}

__device__ __forceinline__ int64_t table_of(const BackwardArgs& a, int64_t linear_id) {
  return upper_bound(a.table_row_off, a.num_tables + 1, linear_id) - 1;
}

// Kernels of the backward are instantiated per "dim class" (G lanes per row, kW float4 (or 4
// scalars) per lane, vector or scalar loads) and launched once per class present, so each holds
// only the registers its class needs. Classes (id: G, kW, vector):
//   0: 4,1,v (dim <= 16)  1: 8,1,v (<= 32)  2: 16,1,v (<= 64)  3: 32,1,v (<= 128)
//   4: 32,2,v (<= 256)    5: 32,4,v (<= 512)  6: 32,8,v (<= 1024)
//   7: 16,2,v (64 < dim <= 128, two rows per warp)  8: 16,4,v (128 < dim <= 256, two rows)
//   9..12: 32,1/2/4/8 scalar (dim % 4 != 0 or unaligned gradient rows; <= 128/256/512/1024)
// Policy kClassesWarp (v1 update, and every variant's chunk sums): one row per warp, classes
// 3..6 and 9..12. kClassesV2: 0..6, 9..12. kClassesV2TwoRows: 0..2, 7, 8, 5, 6, 9..12.
constexpr int kNumClasses = 13;
constexpr int kClassesWarp = 0;
constexpr int kClassesV2 = 1;
constexpr int kClassesV2TwoRows = 2;

__host__ __device__ __forceinline__ int dim_class(int dim, bool grad_aligned, int policy) {
  if (dim % 4 != 0 || !grad_aligned) return 9 + (dim <= 128 ? 0 : dim <= 256 ? 1 : dim <= 512 ? 2 : 3);
  const int units = dim / 4;
  if (policy != kClassesWarp) {
    if (units <= 4) return 0;
    if (units <= 8) return 1;
    if (units <= 16) return 2;
  }
  if (units <= 32) return policy == kClassesV2TwoRows ? 7 : 3;
  if (units <= 64) return policy == kClassesV2TwoRows ? 8 : 4;
  return units <= 128 ? 5 : 6;
}

template <int G, int kW, bool kVec>
__host__ __device__ constexpr int class_id() {
  return !kVec ? 9 + (kW == 1 ? 0 : kW == 2 ? 1 : kW == 4 ? 2 : 3)
         : G == 4 ? 0 : G == 8 ? 1 : G == 16 ? (kW == 1 ? 2 : kW == 2 ? 7 : 8)
         : (kW == 1 ? 3 : kW == 2 ? 4 : kW == 4 ? 5 : 6);
}

// One warp per long-segment chunk (grid-stride; the chunk count lives on the device); kB: the
// gradient rows per batch (v3: grad_batch, else 1).
template <typename IndexT, int kW, bool kVec, int kB>
__global__ void __launch_bounds__(kBlock) chunk_sum_kernel(BackwardArgs a, Scratch s) {
  const int lane = threadIdx.x % kWarp;
  const int64_t num_seg = *a.num_unique;
  if (num_seg == 0) return;
  const int64_t total = static_cast<int64_t>(s.chunk_off[num_seg - 1]) + s.nchunks[num_seg - 1];
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; c < total; c += warps) {
    const int64_t seg = upper_bound(s.chunk_off, num_seg, c) - 1;
    const int dim = static_cast<int>(a.table_dim[table_of(a, a.unique_ids[seg])]);
    if (dim_class(dim, a.grad_aligned, kClassesWarp) != class_id<kWarp, kW, kVec>()) continue;
    const int64_t seg_end = static_cast<int64_t>(s.seg_start[seg]) + s.counts[seg];
    const int64_t q0 = s.seg_start[seg] + (c - s.chunk_off[seg]) * kChunk;
    const int64_t q1 = min_i64(q0 + kChunk, seg_end);
    float4 acc[kW];
#pragma unroll
    for (int u = 0; u < kW; ++u) acc[u] = make_float4(0.f, 0.f, 0.f, 0.f);
    sum_grads<IndexT, kWarp, kW, kVec, kB>(a, s, true, q0, q1, q1 - q0, dim, lane, acc);
    store_units<kWarp, kW, kVec>(s.partials + c * s.dim_stride, dim, lane, acc, true);
  }
}

// g += chunk sums c0 .. c0 + nch - 1 (this lane's elements) in order; cspan >= nch is the
// warp-uniform trip count; kB sums' loads per batch (as add_grads).
template <int G, int kW, bool kVec, int kB>
__device__ __forceinline__ void add_partials(const Scratch& s, int64_t c0, int32_t nch, int32_t cspan, int dim, int l,
                                             float4 (&g)[kW]) {
  for (int32_t c = 0; c < cspan; c += kB) {
    float4 v[kB][kW];
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      if (c + b < nch) {
        load_units<G, kW, kVec>(s.partials + (c0 + c + b) * s.dim_stride, dim, l, v[b]);
      } else {
#pragma unroll
        for (int u = 0; u < kW; ++u) v[b][u] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      if (c + b < nch) {
#pragma unroll
        for (int u = 0; u < kW; ++u) {
          g[u].x = __fadd_rn(g[u].x, v[b][u].x); g[u].y = __fadd_rn(g[u].y, v[b][u].y);
          g[u].z = __fadd_rn(g[u].z, v[b][u].z); g[u].w = __fadd_rn(g[u].w, v[b][u].w);
        }
      }
    }
  }
}

// Sum the gradient of one unique row per group of G lanes (its positions, or its chunk sums)
// and apply the optimizer (active == false: the group only takes part in the shuffles).
// kStreamRows: the weight row and its state are read and written "evict first" (each is used
// once per step), so that the gradient rows, read ~N/U times each, keep their place in L2.
template <typename IndexT, typename WeightT, int G, int kW, bool kVec, bool kWindow, int kB, bool kStreamRows = false>
__device__ __forceinline__ void update_row(const BackwardArgs& a, const Scratch& s, bool active, int64_t seg,
                                           int64_t linear_id, int64_t k, int32_t count, int32_t start, int lane,
                                           Window& win) {
  const int l = lane % G;
  const int dim = active ? static_cast<int>(a.table_dim[k]) : 0;  // dim 0: no element is touched
  const int64_t row = linear_id - (active ? a.table_row_off[k] : linear_id);
  WeightT* wrow = static_cast<WeightT*>(a.weights) + (active ? a.table_woff[k] : 0) + row * dim;
  // load the row and its state first: independent of the gradient, so the latencies overlap
  // (plain loads, not __ldg: these rows are written below); 16-bit rows stay raw until the
  // gradient is summed, so that nothing waits for them before the gradient loads are issued
  Unit<kVec, WeightT> w_raw[kW];
  load_units_any<G, kW, kVec, kStreamRows ? kStream : kPlain, WeightT>(wrow, dim, l, w_raw);
  const bool adagrad = a.optimizer == kOptRowwiseAdagrad;
  float m_old = 0.f;
  if (adagrad && active) m_old = kStreamRows ? __ldcs(a.momentum + linear_id) : a.momentum[linear_id];

  float4 g[kW];
#pragma unroll
  for (int u = 0; u < kW; ++u) g[u] = make_float4(0.f, 0.f, 0.f, 0.f);
  const int64_t q1 = static_cast<int64_t>(start) + count;
  if constexpr (G == kWarp) {  // one row per warp: warp-uniform branches
    if (kWindow && count <= G) {  // (compile-time false for v1)
      sum_grads_window<IndexT, G, kW, kVec, kB>(a, s, true, start, q1, count, dim, lane, win, g);
    } else if (count <= kChunk) {
      sum_grads<IndexT, G, kW, kVec, kB>(a, s, true, start, q1, count, dim, lane, g);
    } else {
      const int32_t nch = s.nchunks[seg];
      add_partials<G, kW, kVec, kB>(s, s.chunk_off[seg], nch, nch, dim, l, g);
    }
  } else {  // 32/G rows per warp, each its own count: warp-uniform trip counts, predicated adds
    // (only v2 has groups narrower than the warp)
    const bool fits = active && count <= G;
    const int32_t wspan = __reduce_max_sync(kFull, fits ? count : 0);
    if (wspan > 0) sum_grads_window<IndexT, G, kW, kVec, kB>(a, s, fits, start, q1, wspan, dim, lane, win, g);
    const bool small = active && count > G && count <= kChunk;
    const int32_t span = __reduce_max_sync(kFull, small ? count : 0);
    if (span > 0) sum_grads<IndexT, G, kW, kVec, kB>(a, s, small, start, q1, span, dim, lane, g);
    const bool big = active && count > kChunk;
    const int64_t c0 = big ? s.chunk_off[seg] : 0;
    const int32_t nch = big ? s.nchunks[seg] : 0;
    const int32_t cspan = __reduce_max_sync(kFull, nch);
    add_partials<G, kW, kVec, kB>(s, c0, nch, cspan, dim, l, g);
  }
  float scale;  // w -= scale * g
  if (!adagrad) {
    scale = a.lr;
  } else {
    // sum of squares in the order of a 32-lane row (v1): a lane of a 16-lane group with kW > 1
    // holds the float4 units of two 32-lane lanes (even u: lane l, odd u: lane l + 16), summed
    // apart, then added (the 32-lane butterfly's first step); padding elements are 0, so the
    // butterfly steps a narrower group skips added exact zeros
    constexpr int kParts = (G == 16 && kW > 1) ? 2 : 1;
    float part[kParts];
#pragma unroll
    for (int i = 0; i < kParts; ++i) part[i] = 0.f;
#pragma unroll
    for (int u = 0; u < kW; ++u) {
      float& sq = part[u % kParts];
      sq = __fadd_rn(sq, __fmul_rn(g[u].x, g[u].x)); sq = __fadd_rn(sq, __fmul_rn(g[u].y, g[u].y));
      sq = __fadd_rn(sq, __fmul_rn(g[u].z, g[u].z)); sq = __fadd_rn(sq, __fmul_rn(g[u].w, g[u].w));
    }
    float sq = part[0];
    if constexpr (kParts == 2) sq = __fadd_rn(part[0], part[1]);
#pragma unroll
    for (int off = G / 2; off >= 1; off >>= 1) sq += __shfl_xor_sync(kFull, sq, off);
    const float m = __fadd_rn(m_old, __fdiv_rn(sq, static_cast<float>(dim)));
    scale = __fdiv_rn(a.lr, __fadd_rn(sqrtf(m), a.eps));
    if (active && l == 0) {
      if constexpr (kStreamRows) __stcs(a.momentum + linear_id, m); else a.momentum[linear_id] = m;
    }
  }
  float4 w[kW];
#pragma unroll
  for (int u = 0; u < kW; ++u) {
    w[u] = unit_to_float4<kVec, WeightT>(w_raw[u]);
    w[u].x = __fsub_rn(w[u].x, __fmul_rn(scale, g[u].x)); w[u].y = __fsub_rn(w[u].y, __fmul_rn(scale, g[u].y));
    w[u].z = __fsub_rn(w[u].z, __fmul_rn(scale, g[u].z)); w[u].w = __fsub_rn(w[u].w, __fmul_rn(scale, g[u].w));
  }
  store_units<G, kW, kVec, WeightT, kStreamRows>(wrow, dim, l, w, true);
}

// v2 with L2 prefetches: group g prefetches the weight row (and rowwise-Adagrad state) of the row
// it will update two rounds from now, the (P + g + 1)-th of the tile's rows still to do (todo).
template <typename WeightT, int G>
__device__ __forceinline__ void prefetch_ahead(const BackwardArgs& a, unsigned todo, bool mine, int64_t my_id,
                                               int32_t my_k, int lane) {
  constexpr int P = kWarp / G;
  unsigned t = todo;  // drop the P + g rows before this group's row two rounds ahead
#pragma unroll
  for (int i = 0; i < 2 * P; ++i) {
    if (i < P + lane / G) t &= t - 1;
  }
  const unsigned ahead = t != 0 ? static_cast<unsigned>(__ffs(t) - 1) : kWarp;
  const int src = ahead < kWarp ? static_cast<int>(ahead) : 0;
  // every lane runs all three full-warp shuffles before any returns: with G < 32, groups differ
  // in whether a row lies two rounds ahead, and a `ahead >= kWarp || !__shfl_sync(...)` short
  // circuit let some lanes skip a shuffle the others waited in (undefined: the warp's next
  // shuffles, of the row to update, paired up wrongly -> an illegal address on the H200)
  const int64_t id = __shfl_sync(kFull, my_id, src);
  const int32_t k = __shfl_sync(kFull, my_k, src);
  const bool src_mine = __shfl_sync(kFull, mine, src);
  if (ahead >= kWarp || !src_mine) return;
  const int64_t dim = a.table_dim[k];
  const WeightT* row = static_cast<const WeightT*>(a.weights) + a.table_woff[k] + (id - a.table_row_off[k]) * dim;
  prefetch_l2(row, dim * static_cast<int64_t>(sizeof(WeightT)), lane % G, G);
  if (a.optimizer == kOptRowwiseAdagrad && lane % G == 0) prefetch_l2(a.momentum + id, sizeof(float), 0, 1);
}

// One warp per tile of 32 unique rows (grid-stride over the device-side unique count): lane i
// fetches the bookkeeping of row i of the tile, then the warp updates the tile's rows of this
// dim class, 32/G rows at a time (group g of G lanes takes the g-th next one). kMode: 0 (v1),
// 1 (v2: short rows sum from the group's window of sorted positions), 2 (v2 + L2 prefetches of
// the rows two rounds ahead), 3 (v3: v2 with the gradient rows loaded in batches, see
// grad_batch, at 4 blocks per SM), 4 (v3s: v3 with the weight rows and state streamed, see
// update_row's kStreamRows, and a grid of one wave, so that the warps sweep the sorted rows
// once, all in the same few tables at a time: the gradient rows of those tables' features
// (33.5 MB per feature at D=128, B=65536) are what L2 holds). Compile-time, so each keeps its own registers
// (fp32, D <= 128: 48 / 60 / 64; D <= 64: - / 64 / 64, the prefetching ones held to 4 blocks
// per SM by their launch bounds, with ~50 bytes of spills, instead of 80 registers).
// v3 (mode 3) is held to 4 blocks of 8 warps per SM (<= 64 registers; unbounded, v2's kernels
// took 78-80 registers at D <= 128 (24 warps/SM) and 94 at D <= 256 (16 warps/SM); v3 spills
// 24-32 bytes instead). Mode 3 covers the classes of one float4 per lane and 32 x 2 (D <= 256);
// the others run mode 1 (Update's launcher maps them).
__host__ __device__ constexpr bool mode_prefetches(int mode) { return mode == 2; }
__host__ __device__ constexpr int update_min_blocks(int mode, int kw, bool vec) {
  return (mode == 2 && kw == 1 && vec) || (mode >= 3 && vec && kw <= 2) ? 4 : 1;
}
__host__ __device__ constexpr bool mode_streams(int mode) { return mode == 4; }

template <typename IndexT, typename WeightT, int G, int kW, bool kVec, int kMode>
__global__ void __launch_bounds__(kBlock, update_min_blocks(kMode, kW, kVec))
    update_kernel(BackwardArgs a, Scratch s, int policy) {
  constexpr int P = kWarp / G;
  constexpr bool kWindow = kMode >= 1;
  constexpr bool l2_prefetch = mode_prefetches(kMode);
  constexpr int kB = kMode >= 3 ? grad_batch<G, kW>() : 1;
  const int lane = threadIdx.x % kWarp;
  const int grp = lane / G;
  const int64_t num_seg = *a.num_unique;
  const int64_t num_tiles = (num_seg + kWarp - 1) / kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; tile < num_tiles;
       tile += warps) {
    const int64_t my_seg = tile * kWarp + lane;
    int64_t my_id = 0;
    int32_t my_k = 0, my_count = 0, my_start = 0;
    bool mine = false;
    if (my_seg < num_seg) {
      my_id = a.unique_ids[my_seg];
      if (my_id < a.total_rows) {  // the segment of out-of-range indices (id total_rows) is skipped
        my_k = static_cast<int32_t>(table_of(a, my_id));
        mine = dim_class(static_cast<int>(a.table_dim[my_k]), a.grad_aligned, policy) == class_id<G, kW, kVec>();
        my_count = s.counts[my_seg];
        my_start = s.seg_start[my_seg];
      }
    }
    unsigned todo = __ballot_sync(kFull, mine);
    Window win{-1, GradRef{0, 1.f, 1.f}};
    if constexpr (l2_prefetch) prefetch_ahead<WeightT, G>(a, todo, mine, my_id, my_k, lane);
    while (todo != 0) {
      int j = -1;  // the row (lane of the tile) this group updates in this round
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (todo != 0) {
          if (i == grp) j = __ffs(todo) - 1;
          todo &= todo - 1;
        }
      }
      if constexpr (l2_prefetch) prefetch_ahead<WeightT, G>(a, todo, mine, my_id, my_k, lane);
      const int src = j >= 0 ? j : 0;
      const int64_t id = __shfl_sync(kFull, my_id, src);
      const int32_t k = __shfl_sync(kFull, my_k, src);
      const int32_t count = __shfl_sync(kFull, my_count, src);
      const int32_t start = __shfl_sync(kFull, my_start, src);
      // (one row per warp: j >= 0 always; a constant lets the compiler drop the predicates)
      update_row<IndexT, WeightT, G, kW, kVec, kWindow, kB, mode_streams(kMode)>(
          a, s, P == 1 || j >= 0, tile * kWarp + src, id, k, count, start, lane, win);
    }
  }
}

// Launch kernel K<G, kW, kVec> (a functor template) once per dim class present in mask.
template <template <int, int, bool> class K>
cudaError_t for_each_class(unsigned mask, const BackwardArgs& a, const Scratch& s, int grid, int policy,
                           cudaStream_t stream) {
  using L = cudaError_t (*)(const BackwardArgs&, const Scratch&, int, int, cudaStream_t);
  const L launchers[kNumClasses] = {K<4, 1, true>::launch,   K<8, 1, true>::launch,   K<16, 1, true>::launch,
                                    K<32, 1, true>::launch,  K<32, 2, true>::launch,  K<32, 4, true>::launch,
                                    K<32, 8, true>::launch,  K<16, 2, true>::launch,  K<16, 4, true>::launch,
                                    K<32, 1, false>::launch, K<32, 2, false>::launch, K<32, 4, false>::launch,
                                    K<32, 8, false>::launch};
  for (int c = 0; c < kNumClasses; ++c) {
    if ((mask >> c) & 1u) {
      const cudaError_t err = launchers[c](a, s, grid, policy, stream);
      if (err != cudaSuccess) return err;
    }
  }
  return cudaSuccess;
}

// Blocks of a kernel resident per SM (the v2 forward's and v3s update's grids are one wave).
template <typename K>
int resident_blocks(K kernel) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kBlock, 0) != cudaSuccess || n < 1) n = 1;
  return n;
}

template <typename IndexT, bool kBatch>  // kBatch: gradient rows in batches (v3)
struct ChunkSum {
  template <int G, int kW, bool kVec>
  struct K {
    static cudaError_t launch(const BackwardArgs& a, const Scratch& s, int grid, int, cudaStream_t stream) {
      if constexpr (G == kWarp) {  // chunk sums always take one warp per chunk
        chunk_sum_kernel<IndexT, kW, kVec, kBatch ? grad_batch<kWarp, kW>() : 1><<<grid, kBlock, 0, stream>>>(a, s);
        return cudaGetLastError();
      }
      return cudaErrorInvalidValue;
    }
  };
};

template <typename IndexT, typename WeightT, int kMode>
struct Update {
  template <int G, int kW, bool kVec>
  struct K {
    static cudaError_t launch(const BackwardArgs& a, const Scratch& s, int grid, int policy, cudaStream_t stream) {
      // prefetches only where they cost no occupancy (one float4 per lane: 64 registers);
      // wider rows run v2 (their prefetching kernels need ~94-120 registers); v3 only for one
      // float4 per lane or 32 lanes x 2 (see update_min_blocks), else v2
      constexpr bool kV3Class = kVec && (kW == 1 || (G == kWarp && kW == 2));
      constexpr int kM = (kMode >= 3 && !kV3Class) || (kMode == 2 && kW > 1) ? 1 : kMode;
      if constexpr (kM > 0 || G == kWarp) {  // v1 has one row per warp only
        const auto kernel = update_kernel<IndexT, WeightT, G, kW, kVec, kM>;
        int g = grid;
        if constexpr (mode_streams(kM)) {  // v3s: one wave
          static const int per_sm = resident_blocks(kernel);  // per instantiation, once per process
          g = std::min(grid, (a.num_sms > 0 ? a.num_sms : 132) * per_sm);
        }
        kernel<<<g, kBlock, 0, stream>>>(a, s, policy);
        return cudaGetLastError();
      }
      return cudaErrorInvalidValue;
    }
  };
};

// ---- per weight type entry points (explicitly instantiated in tbe_kernels[_f16|_bf16].cu) ----

template <typename IndexT, typename WeightT, int V, int G, int kW>
cudaError_t launch_forward_v2(const ForwardArgs& a, int64_t bags, cudaStream_t stream) {
  const int64_t want = (bags + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if constexpr (V >= kFwdFirstLite) {  // v3: one warp per bag (pooled_forward_lite_kernel)
    pooled_forward_lite_kernel<IndexT, WeightT, kFwdV2Loads[V], kFwdV2MinBlocks[V], G, kW>
        <<<static_cast<unsigned>(want), kBlock, 0, stream>>>(a);
  } else {
    const auto kernel = pooled_forward_v2_kernel<IndexT, WeightT, kFwdV2Loads[V], kFwdV2MinBlocks[V], G, kW>;
    static const int per_sm = resident_blocks(kernel);  // per instantiation, once per process
    const int64_t wave = static_cast<int64_t>(a.num_sms > 0 ? a.num_sms : 132) * per_sm;
    kernel<<<static_cast<unsigned>(want < wave ? want : wave), kBlock, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <typename IndexT, typename WeightT, int V>
cudaError_t launch_forward_v2_dim(const ForwardArgs& a, int64_t bags, cudaStream_t stream) {
  if (a.max_dim <= 32) return launch_forward_v2<IndexT, WeightT, V, 8, 1>(a, bags, stream);
  if (a.max_dim <= 64) return launch_forward_v2<IndexT, WeightT, V, 16, 1>(a, bags, stream);
  if (a.max_dim <= 128) return launch_forward_v2<IndexT, WeightT, V, 32, 1>(a, bags, stream);
  return launch_forward_v2<IndexT, WeightT, V, 32, 2>(a, bags, stream);
}

// v2 when asked and the layout allows it (every dim a multiple of 4 in one of (16, 32], (32, 64],
// (64, 128], (128, 256] -- v1's lane split for every bag --, < 2^31 rows per table: the host
// checks (v2_layout); aligned output columns, < 2^31 bags); else v1.
template <typename IndexT, typename WeightT>
cudaError_t launch_forward_pooled(const ForwardArgs& a, int64_t bags, cudaStream_t stream) {
  const bool v2_ok = a.v2_layout && a.out_aligned && a.max_dim > 16 && a.max_dim <= 256 && bags < (int64_t{1} << 31);
  // variants 4..6: configs 1..3 with L2 prefetches (the kernel reads a.variant); 7, 8: configs 4, 5
  switch (v2_ok ? fwd_config(a.variant) : 0) {
    case 1: return launch_forward_v2_dim<IndexT, WeightT, 1>(a, bags, stream);
    case 2: return launch_forward_v2_dim<IndexT, WeightT, 2>(a, bags, stream);
    case 3: return launch_forward_v2_dim<IndexT, WeightT, 3>(a, bags, stream);
    case 4: return launch_forward_v2_dim<IndexT, WeightT, 4>(a, bags, stream);
    case 5: return launch_forward_v2_dim<IndexT, WeightT, 5>(a, bags, stream);
    default: break;
  }
  const unsigned grid = static_cast<unsigned>((bags + kWarpsPerBlock - 1) / kWarpsPerBlock);
  pooled_forward_kernel<IndexT, WeightT><<<grid, kBlock, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename WeightT>
cudaError_t forward_typed(const ForwardArgs& a, cudaStream_t stream) {
  if (a.pooling == kPoolNone) {
    if (a.num_indices == 0) return cudaSuccess;
    const int d = static_cast<int>(a.total_dim);  // for NONE, total_dim is the shared dim
    const bool vec = d % 4 == 0;
    const int64_t work = a.num_indices * (vec ? d / 4 : d);
    const int64_t want = (work + kBlock - 1) / kBlock;
    const int grid = static_cast<int>(want < (int64_t{1} << 20) ? want : (int64_t{1} << 20));
    if (a.index_is_64) nobag_forward_kernel<int64_t, WeightT><<<grid, kBlock, 0, stream>>>(a, d, vec);
    else nobag_forward_kernel<int32_t, WeightT><<<grid, kBlock, 0, stream>>>(a, d, vec);
    return cudaGetLastError();
  }
  const int64_t bags = a.num_features * a.batch;
  if (bags == 0) return cudaSuccess;
  if (a.index_is_64) return launch_forward_pooled<int64_t, WeightT>(a, bags, stream);
  return launch_forward_pooled<int32_t, WeightT>(a, bags, stream);
}

template <typename WeightT, int kMode>
cudaError_t update_mode(unsigned mask, const BackwardArgs& a, const Scratch& s, int grid, int policy,
                        cudaStream_t stream) {
  if (a.index_is_64) return for_each_class<Update<int64_t, WeightT, kMode>::template K>(mask, a, s, grid, policy, stream);
  return for_each_class<Update<int32_t, WeightT, kMode>::template K>(mask, a, s, grid, policy, stream);
}

// step (5) of the backward for weights of type WeightT: the row updates of every dim class
// present under the variant's class policy
template <typename WeightT>
cudaError_t update_typed(const BackwardArgs& a, const Scratch& s, int grid, cudaStream_t stream) {
  if (a.variant == kBwdV1) return update_mode<WeightT, 0>(a.dim_classes, a, s, grid, kClassesWarp, stream);
  const int policy = a.variant == kBwdV2TwoRows ? kClassesV2TwoRows : kClassesV2;
  switch (a.variant) {
    case kBwdV2Prefetch: return update_mode<WeightT, 2>(a.dim_classes_v2, a, s, grid, policy, stream);
    case kBwdV3: return update_mode<WeightT, 3>(a.dim_classes_v2, a, s, grid, policy, stream);
    case kBwdV3Stream: return update_mode<WeightT, 4>(a.dim_classes_v2, a, s, grid, policy, stream);
    default: return update_mode<WeightT, 1>(a.dim_classes_v2, a, s, grid, policy, stream);
  }
}

extern template cudaError_t forward_typed<float>(const ForwardArgs&, cudaStream_t);
extern template cudaError_t update_typed<float>(const BackwardArgs&, const Scratch&, int, cudaStream_t);
extern template cudaError_t forward_typed<__half>(const ForwardArgs&, cudaStream_t);
extern template cudaError_t update_typed<__half>(const BackwardArgs&, const Scratch&, int, cudaStream_t);
extern template cudaError_t forward_typed<__nv_bfloat16>(const ForwardArgs&, cudaStream_t);
extern template cudaError_t update_typed<__nv_bfloat16>(const BackwardArgs&, const Scratch&, int, cudaStream_t);

}  // namespace detail
}  // namespace tbe
