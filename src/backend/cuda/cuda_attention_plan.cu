// The attention planner: work lists of an attention / verify table, made on the device once per forward
// (plan_attention*) and reused by every layer.
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {

void CudaBackend::plan_attention(Tensor table, int64_t q_rows, int64_t kv_rows, int n_heads,
                                 const HostAttentionPlan& host) {
  check_plan_args(table, 4, q_rows, kv_rows, n_heads, "plan_attention");
  check_host_plan(table, host, "plan_attention");
  expect(table, DType::kI32, "plan_attention", "table");
  reset_plan();
  const int64_t n_tiles = table.numel() / 4;
  if (reference_attention() || n_tiles == 0 || q_rows == 0) return;  // nothing reuses a plan
  CUDA_CHECK(cudaSetDevice(device_));
  PlanKey key = attention_key(table, q_rows, kv_rows, n_heads);
  std::optional<CudnnRoute> route = route_to_cudnn(host, q_rows, kv_rows, n_heads);
  if (route) key.skip_min_rows = route->min_rows;
  if (key.split_rows > 0 && host.n_tiles > 0) {  // the host copy says whether the small-tile list has work
    const int32_t below = key.small_below();
    key.small_tiles = std::any_of(host.tiles, host.tiles + host.n_tiles, [&](const AttentionTile& t) {
      return t.q_end - t.q_start > 0 && t.q_end - t.q_start < below;
    });
  }
  make_plan(key);
  plan_ = key;
  route_ = route;
  after_op("plan_attention");
}

void CudaBackend::plan_attention_verify(Tensor table, int64_t q_rows, int64_t n_keys) {
  check_plan_args(table, kVerifyTileInts, q_rows, n_keys, 1, "plan_attention_verify");
  expect(table, DType::kI32, "plan_attention_verify", "table");
  reset_plan();
  if (reference_attention() || table.numel() == 0 || q_rows == 0) return;
  CUDA_CHECK(cudaSetDevice(device_));
  const PlanKey key = verify_key(table, q_rows, n_keys);
  make_plan(key);
  plan_ = key;
  after_op("plan_attention_verify");
}

// The plan key of an attention call over `table` (4-int AttentionTile rows).
CudaBackend::PlanKey CudaBackend::attention_key(Tensor table, int64_t q_rows, int64_t kv_rows, int n_heads) const {
  const bool forced = options_.attention != AttentionKernel::kAuto;
  const kernels::FlashVariant main =
      flash_variant(forced ? flash_.main : small_call_kernel(flash_.main, q_rows, n_heads, traits_.sms));
  PlanKey key{table, 4, q_rows, kv_rows, kernels::flash_block_m(main), main};
  key.split_rows = flash_.split_rows;
  return key;
}

// The plan key of a verify attention call over `table` (6-int VerifyTile rows): work items of the
// verify mode's CTA rows (every VerifyCta the engine picks plans alike).
CudaBackend::PlanKey CudaBackend::verify_key(Tensor table, int64_t q_rows, int64_t n_keys) {
  return PlanKey{table, kVerifyTileInts, q_rows, n_keys, kernels::verify_block_m(kernels::VerifyCta{})};
}

CudaBackend::WorkLists CudaBackend::work_lists(const PlanKey& key) {
  WorkLists w{kernels::attention_work_capacity(key.q_rows, key.n_tiles(), key.block_m), 0};
  if (key.split_rows > 0) {
    const int small_m = kernels::flash_block_m(kSmallTileVariant);
    if (key.small_tiles)
      w.small = std::min<int64_t>(key.q_rows, key.n_tiles() * ((key.split_rows - 1 + small_m - 1) / small_m));
    if (key.split_rows > small_m && key.block_m == 2 * small_m) w.main = std::min(w.main, key.q_rows / small_m);
  }
  return w;
}

// Makes the work lists of `key` (kernels on the stream: no host wait).
CudaBackend::WorkLists CudaBackend::make_plan(const PlanKey& key) {
  const int64_t n_tiles = key.n_tiles();
  const WorkLists lists = work_lists(key);
  reset_plan();
  ensure_attention_work(lists.main + lists.small);
  if (key.tile_ints == 4) {
    kernels::attention_plan(key.table.ptr<int32_t>(), n_tiles, key.q_rows, key.kv_rows, key.block_m, work_.get(),
                            work_count(), lists.main, flags(), stream_, key.skip_min_rows, key.split_rows);
    if (lists.small > 0) {
      kernels::attention_plan(key.table.ptr<int32_t>(), n_tiles, key.q_rows, key.kv_rows,
                              kernels::flash_block_m(kSmallTileVariant), work_.get() + lists.main, work_count() + 1,
                              lists.small, flags(), stream_, key.small_below());
    }
  } else {
    kernels::attention_plan_verify(key.table.ptr<int32_t>(), n_tiles, key.q_rows, key.kv_rows, key.block_m, work_.get(),
                                   work_count(), lists.main, flags(), stream_);
  }
  return lists;
}

// The work lists for `key`: plan_attention's when it was made for exactly this call, else planned
// here (which drops the standing plan: the lists it lived in are overwritten).
CudaBackend::WorkLists CudaBackend::planned_work(const PlanKey& key) {
  if (plan_ && *plan_ == key) return work_lists(key);
  return make_plan(key);
}

void CudaBackend::drop_plan_if_written(const Tensor& dst) {
  if (plan_ && overlap(dst, plan_->table)) reset_plan();
}

// Grows the attention work list; only reallocates when a larger table than ever before arrives.
// The counts exist from the first plan on, also when its lists have no capacity (every tile routed
// to cuDNN, no small tile): the plan kernel writes them either way.
void CudaBackend::ensure_attention_work(int64_t capacity) {
  if (!work_count_) work_count_ = device_alloc(2 * sizeof(int32_t), "attention work counts");
  if (capacity <= work_capacity_) return;
  const int64_t cap = std::max<int64_t>(capacity, 2 * work_capacity_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old list may still be read by queued kernels
  graphs_cache_.clear();                       // and graphs launch kernels that read it
  work_ = std::unique_ptr<kernels::AttentionWorkItem, CudaFree>(static_cast<kernels::AttentionWorkItem*>(
      device_alloc(static_cast<size_t>(cap) * sizeof(kernels::AttentionWorkItem), "attention work list").release()));
  work_capacity_ = cap;
}

void CudaBackend::reset_plan() {
  plan_.reset();
  route_.reset();
}

}  // namespace flashdllm::cuda_impl
