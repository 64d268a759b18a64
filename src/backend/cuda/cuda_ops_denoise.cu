// Denoiser ops: cfg_combine and select_tokens (with its scratch).
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {

void CudaBackend::cfg_combine(Tensor cond, Tensor uncond, float scale, Tensor out) {
  static constexpr const char* kOp = "cfg_combine";
  expect(cond, DType::kF32, kOp, "cond");
  expect(uncond, DType::kF32, kOp, "uncond");
  expect(out, DType::kF32, kOp, "out");
  FDLLM_CHECK_ARG(cond.numel() == uncond.numel() && cond.numel() == out.numel(),
                  "cfg_combine: cond {}, uncond {}, out {} differ in size", cond.describe(), uncond.describe(),
                  out.describe());
  FDLLM_CHECK_ARG((out.data == cond.data || !overlap(out, cond)) && (out.data == uncond.data || !overlap(out, uncond)),
                  "cfg_combine: 'out' must alias an input exactly or not overlap it");
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::cfg_combine_f32(cond.ptr<float>(), uncond.ptr<float>(), scale, cond.numel(), out.ptr<float>(), stream_);
  after_op(kOp);
}

void CudaBackend::select_tokens(Tensor logits, Tensor row_keys, const SelectParams& p, Tensor x0, Tensor conf) {
  static constexpr const char* kOp = "select_tokens";
  expect(logits, DType::kF32, kOp, "logits");
  expect(row_keys, DType::kI32, kOp, "row_keys");
  expect(x0, DType::kI32, kOp, "x0");
  expect(conf, DType::kF64, kOp, "conf");
  const int64_t R = logits.rows(), V = logits.row_size();
  expect_numel(row_keys, R, kOp, "row_keys");
  expect_numel(x0, R, kOp, "x0");
  expect_numel(conf, R, kOp, "conf");
  FDLLM_CHECK_ARG(p.temperature >= 0.0 && std::isfinite(p.temperature),
                  "select_tokens: temperature {} must be finite and >= 0", p.temperature);
  // Dream's rule runs on the same kernel (temperature-scaled confidence logits, margin, entropy), its
  // top-p / top-k filtering in a first kernel per row (kernels/cuda/select.h).
  FDLLM_CHECK_ARG(p.top_p > 0.0 && p.top_p <= 1.0 && p.top_k >= 0,
                  "select_tokens: top_p {} must be in (0, 1] and top_k {} >= 0", p.top_p, p.top_k);
  FDLLM_CHECK_ARG(!p.dream_rule || p.confidence == SelectConfidence::kProbability || p.confidence_f64,
                  "select_tokens: Dream's margin / entropy confidences are computed in float64 (confidence_f64)");
  if (R == 0) return;
  FDLLM_CHECK_ARG(V > 0 && V < (int64_t{1} << 31), "select_tokens: vocabulary size {} outside [1, 2^31)", V);
  kernels::SelectArgs a;
  a.logits = logits.ptr<float>();
  a.row_keys = row_keys.ptr<int32_t>();
  a.x0 = x0.ptr<int32_t>();
  a.conf = conf.ptr<double>();
  a.rows = R;
  a.vocab = V;
  a.temperature = p.temperature;
  a.seed = p.seed;
  a.step = p.step;
  a.suppress_token = p.suppress_token;
  a.exclude_token = p.exclude_token;
  a.conf_suppress_a = p.conf_suppress_a;
  a.conf_suppress_b = p.conf_suppress_b;
  a.confidence_f64 = p.confidence_f64;
  a.scaled_confidence = p.dream_rule;
  if (p.dream_rule) {
    a.top_p = p.top_p;
    a.top_k = p.top_k;
  }
  a.confidence = !p.dream_rule                                   ? kernels::SelectConfidenceKind::kProbability
                 : p.confidence == SelectConfidence::kMargin     ? kernels::SelectConfidenceKind::kMargin
                 : p.confidence == SelectConfidence::kNegEntropy ? kernels::SelectConfidenceKind::kNegEntropy
                                                                 : kernels::SelectConfidenceKind::kProbability;
  CUDA_CHECK(cudaSetDevice(device_));
  ensure_select_scratch(R, kernels::select_chunks(V));
  a.partials = static_cast<kernels::SelectPartial*>(select_partials_.get());
  a.arrivals = static_cast<uint32_t*>(select_arrivals_.get());
  a.filter_theta = static_cast<float*>(select_filter_.get());
  a.filter_cut = reinterpret_cast<int32_t*>(static_cast<float*>(select_filter_.get()) + select_rows_);
  kernels::select_tokens_f32(a, stream_);
  after_op(kOp);
}

// select_tokens' scratch (kernels::SelectArgs): a partial per (row, chunk), an arrival counter per
// row, zeroed here once and left zeroed by every selection, and a filter threshold and tie cut per
// row (Dream's top_p / top_k; written by each filtered selection). Selections run outside recorded
// loops, so growing it drops no graph; queued selections may still use the old arrays.
void CudaBackend::ensure_select_scratch(int64_t rows, int64_t chunks) {
  if (rows <= select_rows_ && rows * chunks <= select_partials_n_) return;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Each capacity is recorded only once its array exists (an allocation may throw).
  if (rows > select_rows_) {
    const int64_t n = std::max(rows, 2 * select_rows_);
    select_arrivals_.reset();
    select_filter_.reset();
    select_rows_ = 0;
    select_arrivals_ = device_alloc(static_cast<size_t>(n) * sizeof(uint32_t), "selection arrivals");
    CUDA_CHECK(cudaMemsetAsync(select_arrivals_.get(), 0, static_cast<size_t>(n) * sizeof(uint32_t), stream_));
    select_filter_ = device_alloc(static_cast<size_t>(n) * (sizeof(float) + sizeof(int32_t)), "selection filters");
    select_rows_ = n;
  }
  if (rows * chunks > select_partials_n_) {
    const int64_t n = std::max(rows * chunks, 2 * select_partials_n_);
    select_partials_.reset();
    select_partials_n_ = 0;
    select_partials_ = device_alloc(static_cast<size_t>(n) * sizeof(kernels::SelectPartial), "selection partials");
    select_partials_n_ = n;
  }
}

}  // namespace flashdllm::cuda_impl
