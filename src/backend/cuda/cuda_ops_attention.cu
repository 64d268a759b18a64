// Attention ops: validate, dispatch (reference / flash kernels of the plan / cuDNN-routed tiles), launch.
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {

void CudaBackend::attention(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                            Tensor out) {
  run_attention("attention", q, k_store, v_store, table, n_heads, scale, out, Tensor{}, 0.f, nullptr);
}

void CudaBackend::attention_with_importance(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads,
                                            float scale, Tensor out, Tensor score_table, float weight, Tensor scores) {
  static constexpr const char* kOp = "attention_with_importance";
  check_score_table_args(table, score_table, kOp);
  const int64_t HD = q.row_size();
  const bool fused = score_table.numel() > 0 && !reference_attention() && n_heads > 0 && HD % n_heads == 0 &&
                     kernels::flash_supports_head_dim(static_cast<int>(HD / n_heads));
  if (!fused) {  // the two ops (reference kernel, other head dims, or nothing to score)
    Backend::attention_with_importance(q, k_store, v_store, table, n_heads, scale, out, score_table, weight, scores);
    return;
  }
  expect(scores, DType::kF32, kOp, "scores");
  expect_numel(scores, k_store.rows(), kOp, "scores");
  FDLLM_CHECK_ARG(std::isfinite(weight), "{}: weight {} must be finite", kOp, weight);
  for (const Tensor* t : {&q, &k_store, &v_store, &table, &score_table, &out})
    FDLLM_CHECK_ARG(!overlap(scores, *t), "{}: 'scores' overlaps another operand ({})", kOp, t->describe());
  run_attention(kOp, q, k_store, v_store, table, n_heads, scale, out, score_table, weight, scores.ptr<float>());
}

// attention() and, with `importance` set, the fused raw-importance variant of score_table's rows
// (flash path only).
void CudaBackend::run_attention(const char* kOp, Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads,
                                float scale, Tensor out, Tensor score_table, float weight, float* importance) {
  expect(q, DType::kBF16, kOp, "q");
  expect(k_store, DType::kBF16, kOp, "k_store");
  expect(v_store, DType::kBF16, kOp, "v_store");
  expect(table, DType::kI32, kOp, "table");
  expect(out, DType::kBF16, kOp, "out");
  const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows();
  const int kv_heads = opcheck::kv_heads_of(q, k_store, n_heads, kOp);  // grouped-query attention when < n_heads
  expect_matrix(out, Tq, HD, kOp, "out");
  expect_matrix(v_store, N, k_store.row_size(), kOp, "v_store");
  FDLLM_CHECK_ARG(table.numel() % 4 == 0, "attention: table must be [n_tiles, 4], got {}", table.describe());
  FDLLM_CHECK_ARG(std::isfinite(scale) && scale > 0.f, "attention: scale {} must be finite and > 0", scale);
  for (const Tensor* t : {&q, &k_store, &v_store})
    FDLLM_CHECK_ARG(!overlap(out, *t), "attention: 'out' overlaps an input ({})", t->describe());
  const int64_t n_tiles = table.numel() / 4;
  if (n_tiles == 0 || Tq == 0) return;
  kernels::AttentionArgs a;
  a.q = bf16(q);
  a.k = bf16(k_store);
  a.v = bf16(v_store);
  a.out = bf16(out);
  a.q_rows = Tq;
  a.kv_rows = N;
  a.n_heads = n_heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = static_cast<int>(HD / n_heads);
  a.scale = scale;
  a.importance = importance;
  a.importance_weight = weight;
  a.table = table.ptr<int32_t>();
  if (importance != nullptr) {
    a.score_tiles = score_table.ptr<int32_t>();
    a.n_score_tiles = static_cast<int32_t>(score_table.numel() / 4);
  }
  a.error_flags = flags();
  CUDA_CHECK(cudaSetDevice(device_));
  if (reference_attention()) {
    kernels::attention_reference(a, table.ptr<int32_t>(), n_tiles, flags(), stream_);
    after_op(kOp);
    return;
  }
  FDLLM_CHECK(kernels::flash_supports_head_dim(a.head_dim), ErrorCode::kUnsupported,
              "attention: head_dim {} has no flash kernel (supported: 128); FLASHDLLM_ATTENTION=reference runs the "
              "slow reference kernel for head_dim multiples of 32 up to 256",
              a.head_dim);
  const PlanKey key = attention_key(table, Tq, N, n_heads);
  // The standing plan serves this call when it was made for this table; its routed tiles run in
  // cuDNN when the call matches the route (heads, head_dim, scale, score tiles), else the call
  // plans again with every tile on our kernel.
  WorkLists lists;
  bool cudnn_call = false;
  if (plan_ && plan_->same_table(key)) {
    cudnn_call = plan_->skip_min_rows > 0 && route_ && route_->shape.n_heads == n_heads &&
                 route_->shape.n_kv_heads == kv_heads && route_->shape.head_dim == a.head_dim &&
                 route_->shape.scale == scale &&
                 (importance == nullptr || score_table.numel() / 4 == route_->n_score_tiles);
    lists = plan_->skip_min_rows > 0 && !cudnn_call ? make_plan(key) : planned_work(*plan_);
  } else {
    lists = make_plan(key);
  }
  kernels::attention_flash(a, key.main, work_.get(), work_count(), lists.main, stream_);
  if (lists.small > 0)
    kernels::attention_flash(a, kSmallTileVariant, work_.get() + lists.main, work_count() + 1, lists.small, stream_);
  if (cudnn_call) run_cudnn(a);
  after_op(kOp);
}

void CudaBackend::attention_verify(Tensor q, Tensor k_store, Tensor v_store, Tensor key_rows, Tensor k_tile,
                                   Tensor v_tile, Tensor table, int n_heads, float scale, Tensor out) {
  static constexpr const char* kOp = "attention_verify";
  const int kv_heads = opcheck::expect_verify_operands(q, k_store, v_store, key_rows, k_tile, v_tile, table, n_heads,
                                                       out, DType::kBF16, DeviceKind::kCUDA);
  const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows();
  FDLLM_CHECK_ARG(std::isfinite(scale) && scale > 0.f, "attention_verify: scale {} must be finite and > 0", scale);
  for (const Tensor* t : {&q, &k_store, &v_store, &k_tile, &v_tile, &key_rows, &table})
    FDLLM_CHECK_ARG(!overlap(out, *t), "attention_verify: 'out' overlaps an input ({})", t->describe());
  const int64_t n_tiles = table.numel() / kVerifyTileInts;
  if (n_tiles == 0 || Tq == 0) return;
  kernels::VerifyAttentionArgs a;
  a.q = bf16(q);
  a.k_store = bf16(k_store);
  a.v_store = bf16(v_store);
  a.key_rows = key_rows.ptr<int32_t>();
  a.k_tile = bf16(k_tile);
  a.v_tile = bf16(v_tile);
  a.out = bf16(out);
  a.q_rows = Tq;
  a.kv_rows = N;
  a.n_keys = key_rows.numel();
  a.n_heads = n_heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = static_cast<int>(HD / n_heads);
  a.scale = scale;
  CUDA_CHECK(cudaSetDevice(device_));
  if (reference_attention() || !kernels::flash_supports_head_dim(a.head_dim)) {
    kernels::attention_verify_bf16(a, table.ptr<int32_t>(), n_tiles, flags(), stream_);  // scalar kernel
    after_op(kOp);
    return;
  }
  // Tensor cores: the flash kernel's verify mode over work items of verify_block_m rows per tile.
  kernels::AttentionArgs fa;
  fa.q = a.q;
  fa.k = a.k_store;
  fa.v = a.v_store;
  fa.out = a.out;
  fa.q_rows = Tq;
  fa.kv_rows = N;
  fa.n_heads = n_heads;
  fa.n_kv_heads = kv_heads;
  fa.head_dim = a.head_dim;
  fa.scale = scale;
  kernels::VerifyKeys vk;
  vk.table = table.ptr<int32_t>();
  vk.key_rows = a.key_rows;
  vk.k_tile = a.k_tile;
  vk.v_tile = a.v_tile;
  vk.error_flags = flags();
  const int64_t capacity = planned_work(verify_key(table, Tq, a.n_keys)).main;
  // About one work item per tile (tiles of <= 32 rows), more where tiles are longer.
  const int64_t items = std::max<int64_t>(table.rows(), (Tq + 31) / 32);
  kernels::attention_verify_flash(fa, vk, work_.get(), work_count(), capacity, stream_,
                                  kernels::verify_cta_for(items * n_heads));
  after_op(kOp);
}

void CudaBackend::attention_importance(Tensor q, Tensor k_store, Tensor table, int n_heads, float scale,
                                       bool probability_mass, float weight, Tensor scores) {
  static constexpr const char* kOp = "attention_importance";
  expect(q, DType::kBF16, kOp, "q");
  expect(k_store, DType::kBF16, kOp, "k_store");
  expect(table, DType::kI32, kOp, "table");
  expect(scores, DType::kF32, kOp, "scores");
  const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows();
  const int kv_heads = opcheck::kv_heads_of(q, k_store, n_heads, kOp);
  expect_numel(scores, N, kOp, "scores");
  FDLLM_CHECK_ARG(table.numel() % 4 == 0, "attention_importance: table must be [n_tiles, 4], got {}", table.describe());
  FDLLM_CHECK_ARG(std::isfinite(weight), "attention_importance: weight {} must be finite", weight);
  FDLLM_CHECK_ARG(!probability_mass || (std::isfinite(scale) && scale > 0.f),
                  "attention_importance: scale {} must be finite and > 0 for the probability-mass variant", scale);
  for (const Tensor* t : {&q, &k_store, &table})
    FDLLM_CHECK_ARG(!overlap(scores, *t), "attention_importance: 'scores' overlaps an input ({})", t->describe());
  const int64_t n_tiles = table.numel() / 4;
  if (n_tiles == 0) return;
  kernels::ImportanceArgs a;
  a.q = bf16(q);
  a.k = bf16(k_store);
  a.scores = scores.ptr<float>();
  a.q_rows = Tq;
  a.kv_rows = N;
  a.n_heads = n_heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = static_cast<int>(HD / n_heads);
  a.scale = scale;
  a.weight = weight;
  a.probability_mass = probability_mass;
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::attention_importance_bf16(a, table.ptr<int32_t>(), n_tiles, flags(), stream_);
  after_op(kOp);
}

}  // namespace flashdllm::cuda_impl
