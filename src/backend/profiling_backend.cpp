#include "backend/profiling_backend.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/format.h>

namespace flashdllm {

void OpProfile::add(const std::string& op, double seconds) {
  OpProfileEntry& e = by_op_[op];
  e.op = op;
  e.calls += 1;
  e.seconds += seconds;
}

std::vector<OpProfileEntry> OpProfile::entries() const {
  std::vector<OpProfileEntry> v;
  v.reserve(by_op_.size());
  for (const auto& [name, e] : by_op_) v.push_back(e);
  std::sort(v.begin(), v.end(), [](const OpProfileEntry& a, const OpProfileEntry& b) { return a.seconds > b.seconds; });
  return v;
}

double OpProfile::total_seconds() const {
  double s = 0.0;
  for (const auto& [name, e] : by_op_) s += e.seconds;
  return s;
}

namespace {

class ProfilingBackend final : public Backend {
  // Defined first: the overrides below deduce its return type.
  template <class F>
  auto timed(const std::string& op, F&& f) {
    inner_->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    struct Record {  // records on every exit path, also when the op throws
      ProfilingBackend& self;
      const std::string& op;
      std::chrono::steady_clock::time_point t0;
      ~Record() {
        try {
          self.inner_->synchronize();
        } catch (...) {  // a device error surfaces at the caller's next synchronising call
        }
        self.profile_.add(op, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    } record{*this, op, t0};
    return f();
  }

 public:
  ProfilingBackend(std::unique_ptr<Backend> inner, OpProfile& profile)
      : inner_(std::move(inner)), profile_(profile) {}

  DeviceKind device() const noexcept override { return inner_->device(); }
  std::string name() const override { return inner_->name() + " [op profiling]"; }
  DType activation_dtype() const noexcept override { return inner_->activation_dtype(); }
  DType weight_dtype() const noexcept override { return inner_->weight_dtype(); }
  void* native_stream() const noexcept override { return inner_->native_stream(); }
  int device_index() const noexcept override { return inner_->device_index(); }
  size_t free_memory() const override { return inner_->free_memory(); }
  int64_t routed_attention_calls() const override { return inner_->routed_attention_calls(); }
  void check_precision(bool fp8_weights, bool fp8_kv) const override { inner_->check_precision(fp8_weights, fp8_kv); }
  RowPadding row_padding() const override { return inner_->row_padding(); }

  Buffer alloc(size_t bytes, const char* what) override {
    return timed("alloc", [&] { return inner_->alloc(bytes, what); });
  }
  void copy_from_host(Tensor dst, const void* src) override {
    timed("copy_from_host", [&] { inner_->copy_from_host(dst, src); });
  }
  void copy_to_host(void* dst, Tensor src) override {
    timed("copy_to_host", [&] { inner_->copy_to_host(dst, src); });
  }
  void fill_zero(Tensor t) override {
    timed("fill_zero", [&] { inner_->fill_zero(t); });
  }
  void synchronize() override { inner_->synchronize(); }
  void upload_weight(Tensor dst, DType src_dtype, const void* src) override {
    timed("upload_weight", [&] { inner_->upload_weight(dst, src_dtype, src); });
  }
  void fill_normal(Tensor dst, uint64_t seed, uint64_t stream, float mean, float std,
                   const FillWindow& window = {}) override {
    timed("fill_normal", [&] { inner_->fill_normal(dst, seed, stream, mean, std, window); });
  }
  void embedding(Tensor table, Tensor ids, Tensor out) override {
    timed("embedding", [&] { inner_->embedding(table, ids, out); });
  }
  void rmsnorm(Tensor x, Tensor w, float eps, Tensor out) override {
    timed("rmsnorm", [&] { inner_->rmsnorm(x, w, eps, out); });
  }
  void matmul(Tensor x, Tensor w, Tensor out, bool accumulate) override {
    const std::string op = fmt::format("matmul {}x{}{}", w.rows(), w.row_size(),
                                       out.dtype != inner_->activation_dtype() ? " ->f32" : "");
    timed(op, [&] { inner_->matmul(x, w, out, accumulate); });
  }
  void plan_attention(Tensor table, int64_t q_rows, int64_t kv_rows, int n_heads,
                      const HostAttentionPlan& host = {}) override {
    timed("plan_attention", [&] { inner_->plan_attention(table, q_rows, kv_rows, n_heads, host); });
  }
  void plan_attention_verify(Tensor table, int64_t q_rows, int64_t n_keys) override {
    timed("plan_attention_verify", [&] { inner_->plan_attention_verify(table, q_rows, n_keys); });
  }
  void matmul_fp8(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) override {
    const std::string op = fmt::format("matmul_fp8 {}x{}{}", w.rows(), w.row_size(), accumulate ? " +=" : "");
    timed(op, [&] { inner_->matmul_fp8(x, w, w_scale, out, accumulate); });
  }
  void swiglu_matmul_fp8(Tensor gate_up, Tensor act, Tensor w, Tensor w_scale, Tensor out, bool accumulate) override {
    const std::string op = fmt::format("swiglu + matmul_fp8 {}x{}{}", w.rows(), w.row_size(), accumulate ? " +=" : "");
    timed(op, [&] { inner_->swiglu_matmul_fp8(gate_up, act, w, w_scale, out, accumulate); });
  }
  void qkv_rope_store(Tensor xn, Tensor wqkv, const QkvExtras& extra, Tensor positions, Tensor rows,
                      const RopeTable& rope, int n_heads, Tensor q_out, Tensor k_store, Tensor v_store,
                      Tensor scratch) override {
    timed("qkv_rope_store", [&] {
      inner_->qkv_rope_store(xn, wqkv, extra, positions, rows, rope, n_heads, q_out, k_store, v_store, scratch);
    });
  }
  void moe_route(Tensor router_logits, Tensor expert_bias, const MoeRouting& routing, Tensor expert_ids,
                 Tensor expert_weights) override {
    timed("moe_route", [&] { inner_->moe_route(router_logits, expert_bias, routing, expert_ids, expert_weights); });
  }
  void moe_experts(Tensor x, Tensor expert_ids, Tensor expert_weights, Tensor w_gate_up, Tensor w_down, Tensor out,
                   bool accumulate, Tensor scratch) override {
    timed("moe_experts",
          [&] { inner_->moe_experts(x, expert_ids, expert_weights, w_gate_up, w_down, out, accumulate, scratch); });
  }
  void attention(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                 Tensor out) override {
    timed("attention", [&] { inner_->attention(q, k_store, v_store, table, n_heads, scale, out); });
  }
  void attention_verify(Tensor q, Tensor k_store, Tensor v_store, Tensor key_rows, Tensor k_tile, Tensor v_tile,
                        Tensor table, int n_heads, float scale, Tensor out) override {
    timed("attention_verify", [&] {
      inner_->attention_verify(q, k_store, v_store, key_rows, k_tile, v_tile, table, n_heads, scale, out);
    });
  }
  void attention_importance(Tensor q, Tensor k_store, Tensor table, int n_heads, float scale, bool probability_mass,
                            float weight, Tensor scores) override {
    timed("attention_importance", [&] {
      inner_->attention_importance(q, k_store, table, n_heads, scale, probability_mass, weight, scores);
    });
  }
  void attention_with_importance(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                                 Tensor out, Tensor score_table, float weight, Tensor scores) override {
    timed("attention_with_importance", [&] {
      inner_->attention_with_importance(q, k_store, v_store, table, n_heads, scale, out, score_table, weight, scores);
    });
  }
  void swiglu(Tensor gate_up, Tensor out) override {
    timed("swiglu", [&] { inner_->swiglu(gate_up, out); });
  }
  void gather_rows(Tensor x, Tensor rows, Tensor out) override {
    timed("gather_rows", [&] { inner_->gather_rows(x, rows, out); });
  }
  void gather_columns(Tensor x, Tensor cols, Tensor out) override {
    timed("gather_columns", [&] { inner_->gather_columns(x, cols, out); });
  }
  void cfg_combine(Tensor cond, Tensor uncond, float scale, Tensor out) override {
    timed("cfg_combine", [&] { inner_->cfg_combine(cond, uncond, scale, out); });
  }
  void select_tokens(Tensor logits, Tensor row_keys, const SelectParams& params, Tensor x0, Tensor conf) override {
    timed("select_tokens", [&] { inner_->select_tokens(logits, row_keys, params, x0, conf); });
  }

 private:
  std::unique_ptr<Backend> inner_;
  OpProfile& profile_;
};

}  // namespace

std::unique_ptr<Backend> make_profiling_backend(std::unique_ptr<Backend> inner, OpProfile& profile) {
  return std::make_unique<ProfilingBackend>(std::move(inner), profile);
}

}  // namespace flashdllm
