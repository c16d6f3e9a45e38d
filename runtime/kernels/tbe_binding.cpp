// Thin torch binding of tbe_kernels.cu: checks, output/workspace allocation, current stream.
// Everything is launched on the caller's current CUDA stream; nothing here syncs the host.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "tbe_kernels.h"

namespace {

void check_cuda(const torch::Tensor& t, const char* name, c10::ScalarType dtype) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.scalar_type() == dtype, name, " has dtype ", t.scalar_type(), ", expected ", dtype);
}

int num_sms(const torch::Tensor& on) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, on.get_device());
  return sms;
}

// float / half / bfloat16 weights -> kWeights* code
int weights_type(const torch::Tensor& w) {
  TORCH_CHECK(w.is_cuda() && w.is_contiguous(), "weights must be a contiguous CUDA tensor");
  switch (w.scalar_type()) {
    case torch::kFloat32: return tbe::kWeightsF32;
    case torch::kFloat16: return tbe::kWeightsF16;
    case torch::kBFloat16: return tbe::kWeightsBF16;
    default: TORCH_CHECK(false, "weights must be float32, float16 or bfloat16, got ", w.scalar_type());
  }
  return -1;
}

void check_indices(const torch::Tensor& indices, const torch::Tensor& offsets) {
  TORCH_CHECK(indices.is_cuda() && offsets.is_cuda(), "indices/offsets must be CUDA tensors");
  TORCH_CHECK(indices.is_contiguous() && offsets.is_contiguous(), "indices/offsets must be contiguous");
  TORCH_CHECK(indices.scalar_type() == offsets.scalar_type(), "indices and offsets must share a dtype");
  TORCH_CHECK(indices.scalar_type() == torch::kInt64 || indices.scalar_type() == torch::kInt32,
              "indices must be int32 or int64");
  TORCH_CHECK(indices.numel() < (int64_t{1} << 31) - 1, "at most 2^31-2 indices per call");
}

// out = lookup (into out_opt when given); first_bad (1,) int64 preset by the caller to kNoError, atomicMin'ed by the kernel.
torch::Tensor forward(torch::Tensor weights, torch::Tensor feat_woff, torch::Tensor feat_dim, torch::Tensor feat_rows,
                      torch::Tensor out_off, torch::Tensor indices, torch::Tensor offsets,
                      c10::optional<torch::Tensor> psw, int64_t pooling, int64_t total_dim, int64_t batch,
                      torch::Tensor first_bad, c10::optional<torch::Tensor> out_opt, int64_t max_dim, bool v2_layout,
                      int64_t variant) {
  const c10::cuda::CUDAGuard guard(weights.device());
  const int wtype = weights_type(weights);
  check_cuda(feat_woff, "feat_woff", torch::kInt64);
  check_cuda(feat_dim, "feat_dim", torch::kInt64);
  check_cuda(feat_rows, "feat_rows", torch::kInt64);
  check_cuda(out_off, "out_off", torch::kInt64);
  check_cuda(first_bad, "first_bad", torch::kInt64);
  check_indices(indices, offsets);
  const int64_t nf = feat_dim.numel();
  TORCH_CHECK(offsets.numel() == nf * batch + 1, "offsets must have F*B+1 entries");
  const int64_t n = indices.numel();
  tbe::ForwardArgs a{};
  if (psw.has_value()) {
    check_cuda(*psw, "per_sample_weights", torch::kFloat32);
    TORCH_CHECK(psw->numel() == n, "per_sample_weights must have one entry per index");
    a.psw = psw->data_ptr<float>();
  }
  const int64_t out_rows = pooling == tbe::kPoolNone ? n : batch;
  torch::Tensor out;
  if (out_opt.has_value()) {  // the caller's buffer (tests pass a NaN-poisoned one)
    out = *out_opt;
    check_cuda(out, "out", torch::kFloat32);
    TORCH_CHECK(out.dim() == 2 && out.size(0) == out_rows && out.size(1) == total_dim, "out has the wrong shape");
  } else {
    out = torch::empty({out_rows, total_dim}, weights.options().dtype(torch::kFloat32));
  }
  a.weights = weights.data_ptr();
  a.weights_type = wtype;
  a.feat_woff = feat_woff.data_ptr<int64_t>();
  a.feat_dim = feat_dim.data_ptr<int64_t>();
  a.feat_rows = feat_rows.data_ptr<int64_t>();
  a.out_off = out_off.data_ptr<int64_t>();
  a.indices = indices.data_ptr();
  a.offsets = offsets.data_ptr();
  a.index_is_64 = indices.scalar_type() == torch::kInt64;
  a.out = out.data_ptr<float>();
  a.first_bad = reinterpret_cast<unsigned long long*>(first_bad.data_ptr<int64_t>());
  a.num_features = nf;
  a.batch = batch;
  a.num_indices = n;
  a.total_dim = total_dim;
  a.pooling = static_cast<int>(pooling);
  a.out_aligned = total_dim % 4 == 0;
  TORCH_CHECK(variant >= 0 && variant < tbe::kFwdVariants, "forward variant must be 0..", tbe::kFwdVariants - 1);
  a.max_dim = max_dim;
  a.v2_layout = v2_layout;
  a.variant = static_cast<int>(variant);
  a.num_sms = num_sms(weights);
  const cudaError_t err = tbe::forward(a, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "tbe forward launch failed: ", cudaGetErrorString(err));
  return out;
}

// Updates weights/momentum in place; returns (unique_ids (N,), num_unique (1,)) on the device.
std::vector<torch::Tensor> backward(torch::Tensor weights, torch::Tensor momentum, torch::Tensor feat_rows,
                                    torch::Tensor feat_row_off, torch::Tensor out_off, torch::Tensor table_row_off,
                                    torch::Tensor table_woff, torch::Tensor table_dim, torch::Tensor indices,
                                    torch::Tensor offsets, c10::optional<torch::Tensor> psw, torch::Tensor grad_out,
                                    int64_t pooling, int64_t total_dim, int64_t batch, int64_t max_dim,
                                    int64_t total_rows, bool grad_aligned, int64_t dim_classes,
                                    int64_t dim_classes_v2, int64_t optimizer, double lr, double eps,
                                    int64_t variant) {
  const c10::cuda::CUDAGuard guard(weights.device());
  const int wtype = weights_type(weights);
  check_cuda(feat_rows, "feat_rows", torch::kInt64);
  check_cuda(feat_row_off, "feat_row_off", torch::kInt64);
  check_cuda(out_off, "out_off", torch::kInt64);
  check_cuda(table_row_off, "table_row_off", torch::kInt64);
  check_cuda(table_woff, "table_woff", torch::kInt64);
  check_cuda(table_dim, "table_dim", torch::kInt64);
  check_cuda(grad_out, "grad_output", torch::kFloat32);
  check_indices(indices, offsets);
  const int64_t nf = feat_rows.numel();
  const int64_t n = indices.numel();
  TORCH_CHECK(offsets.numel() == nf * batch + 1, "offsets must have F*B+1 entries");
  TORCH_CHECK(nf * batch < (int64_t{1} << 31), "at most 2^31-1 bags per call");
  TORCH_CHECK(max_dim <= tbe::kMaxDim, "dims above ", tbe::kMaxDim, " are not supported");
  tbe::BackwardArgs a{};
  if (psw.has_value()) {
    check_cuda(*psw, "per_sample_weights", torch::kFloat32);
    TORCH_CHECK(psw->numel() == n, "per_sample_weights must have one entry per index");
    a.psw = psw->data_ptr<float>();
  }
  if (optimizer == tbe::kOptRowwiseAdagrad) check_cuda(momentum, "momentum", torch::kFloat32);
  // padding after the unique ids reads total_rows, as in the reference (one fill of N int64)
  auto unique_ids = torch::full({n}, total_rows, indices.options().dtype(torch::kInt64));
  auto num_unique = torch::empty({1}, indices.options().dtype(torch::kInt64));
  a.weights = weights.data_ptr();
  a.weights_type = wtype;
  a.momentum = optimizer == tbe::kOptRowwiseAdagrad ? momentum.data_ptr<float>() : nullptr;
  a.feat_rows = feat_rows.data_ptr<int64_t>();
  a.feat_row_off = feat_row_off.data_ptr<int64_t>();
  a.out_off = out_off.data_ptr<int64_t>();
  a.table_row_off = table_row_off.data_ptr<int64_t>();
  a.table_woff = table_woff.data_ptr<int64_t>();
  a.table_dim = table_dim.data_ptr<int64_t>();
  a.num_tables = table_dim.numel();
  a.indices = indices.data_ptr();
  a.offsets = offsets.data_ptr();
  a.index_is_64 = indices.scalar_type() == torch::kInt64;
  a.grad_out = grad_out.data_ptr<float>();
  a.num_features = nf;
  a.batch = batch;
  a.num_indices = n;
  a.total_dim = total_dim;
  a.max_dim = max_dim;
  a.pooling = static_cast<int>(pooling);
  a.grad_aligned = grad_aligned;
  a.dim_classes = static_cast<unsigned>(dim_classes);
  a.dim_classes_v2 = static_cast<unsigned>(dim_classes_v2);
  TORCH_CHECK(variant >= tbe::kBwdV1 && variant <= tbe::kBwdV3Stream, "backward variant must be ", tbe::kBwdV1,
              "..", tbe::kBwdV3Stream);
  a.variant = static_cast<int>(variant);
  a.optimizer = static_cast<int>(optimizer);
  a.lr = static_cast<float>(lr);
  a.eps = static_cast<float>(eps);
  a.unique_ids = unique_ids.data_ptr<int64_t>();
  a.num_unique = num_unique.data_ptr<int64_t>();
  a.total_rows = total_rows;
  a.num_sms = num_sms(weights);
  // scratch from torch's caching allocator, on the current stream (freed when this returns:
  // the allocator only reuses it for work queued later on the same stream)
  const size_t bytes = tbe::backward_workspace_bytes(a);
  auto workspace = torch::empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)}, indices.options().dtype(torch::kUInt8));
  const cudaError_t err = tbe::backward(a, workspace.data_ptr(), bytes, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "tbe backward launch failed: ", cudaGetErrorString(err));
  return {unique_ids, num_unique};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "TBE forward (all features, one launch)");
  m.def("backward", &backward, "TBE backward fused with the optimizer (in place)");
}
