// moe_bench: one mixture-of-experts FFN layer on the CUDA backend (Backend::moe_experts: the device
// sort into per-expert groups, the grouped gate|up GEMM, SwiGLU, the grouped down GEMM and the
// weighted un-permutation, kernels/cuda/moe.h) against the same experts run as one cuBLASLt GEMM
// each (kernels::GemmLt, the engine's dense GEMM): per expert e with n_e > 0 rows,
//   gate|up [n_e, 2F] = x_e · w_gate_up[e]ᵀ,  act = SwiGLU (kernels::swiglu_bf16),
//   y_e [n_e, D] = act · w_down[e]ᵀ
// on rows gathered per expert before the timing (the per-expert side's gather, scatter and weighted
// sum are not timed: its time is a lower bound of that route). Issue 47's "grouped GEMM vs one
// cuBLASLt GEMM per expert" ratio, at T = slots x --rows-per-slot rows, for each --slots value.
// Shapes default to LLaDA-MoE-7B-A1B's layer (D 2048, 64 experts of width 1024, top 8); the routing
// is the model's (softmax over all experts, top-k, no renormalisation) on N(0, 1) router logits,
// which spreads the rows over the experts about evenly.
// With the sm_90 kernels (FLASHDLLM_BENCH_CUTLASS_GROUPED) a third side: CUTLASS's sm_90 grouped GEMM
// (bench/cutlass_grouped_gemm.h) on the same gathered rows, the group sizes read on the device: the
// grouped gate|up, one SwiGLU over all rows, the grouped down (the same untimed gather); its expert
// outputs are checked against the per-expert side's (max |difference| / max |value|, bf16 outputs of
// the same products: failure above 2^-6).
// The layer's floor: max(FLOPs / --peak-tflops, bytes / --peak-gbps), FLOPs = 2·T·k·3·D·F, bytes =
// the weights of the experts that received a row (3·D·F·2 each) + x, out and the gate|up / SwiGLU /
// expert outputs written and read once.
// Usage: moe_bench [--slots 1,4,16,32,64] [--rows-per-slot 128] [--json out.json]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bench/cuda_bench_util.h"
#include "core/dtype.h"
#include "core/moe_routing.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/swiglu.h"
#ifndef FLASHDLLM_BENCH_CUTLASS_GROUPED
#define FLASHDLLM_BENCH_CUTLASS_GROUPED 0
#endif
#if FLASHDLLM_BENCH_CUTLASS_GROUPED
#include <stdexcept>

#include "bench/cutlass_grouped_gemm.h"
#endif

using namespace flashdllm;

namespace {

/// A device tensor with its memory.
struct Dev {
  Buffer buf;
  Tensor t;
};

Dev make(Backend& be, DType dt, std::initializer_list<int64_t> dims, const char* what) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  Dev d;
  d.buf = be.alloc(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dt), what);
  d.t = Tensor(d.buf.data(), dt, be.device(), dims);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"one MoE FFN layer: the CUDA backend's grouped experts vs one cuBLASLt GEMM per expert"};
  std::string slots_sel = "1,4,16,32,64", json_path;
  int64_t rows_per_slot = 128, D = 2048, F = 1024, E = 64, k = 8;
  int warmup = 3, iters = 10;
  double peak_tflops = 989.4, peak_gbps = 3350.0;
  app.add_option("--slots", slots_sel, "comma-separated slot counts (T = slots x rows-per-slot)");
  app.add_option("--rows-per-slot", rows_per_slot, "query rows per slot (Flash-Cache: beta_t + beta_m)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--d-model", D, "hidden size D")->check(CLI::Range(8, 16384));
  app.add_option("--expert-width", F, "each expert's SwiGLU width F")->check(CLI::Range(8, 65536));
  app.add_option("--experts", E, "routed experts E")->check(CLI::Range(1, 1024));
  app.add_option("--top-k", k, "experts per token")->check(CLI::Range(1, 64));
  app.add_option("--warmup", warmup, "warm-up launches")->check(CLI::Range(0, 1000));
  app.add_option("--iters", iters, "timed measurements (median reported)")->check(CLI::Range(1, 10000));
  app.add_option("--peak-tflops", peak_tflops, "dense bf16 peak for the floor (H100/H200 SXM: 989.4)");
  app.add_option("--peak-gbps", peak_gbps, "memory bandwidth for the floor (H100 SXM: 3350, H200: 4800)");
  app.add_option("--json", json_path, "write results as JSON");
  CLI11_PARSE(app, argc, argv);
  if (k > E) {
    std::fprintf(stderr, "moe_bench: --top-k %lld exceeds --experts %lld\n", static_cast<long long>(k),
                 static_cast<long long>(E));
    return 2;
  }
  std::vector<long long> slot_counts;
  try {
    slot_counts = bench::parse_list(slots_sel);
  } catch (const std::exception&) {
    slot_counts.clear();
  }
  if (slot_counts.empty() || *std::min_element(slot_counts.begin(), slot_counts.end()) < 1) {
    std::fprintf(stderr, "moe_bench: --slots '%s' must be a comma-separated list of counts >= 1\n", slots_sel.c_str());
    return 2;
  }
  try {
    std::unique_ptr<Backend> be = make_cuda_backend(0);
    auto* stream = static_cast<cudaStream_t>(be->native_stream());
    const bench::DeviceInfo dev = bench::device_info(be->device_index());
    MoeRouting routing;
    routing.n_experts = static_cast<int32_t>(E);
    routing.top_k = static_cast<int32_t>(k);
    Dev w_gu = make(*be, DType::kBF16, {E, 2 * F, D}, "experts' gate|up"),
        w_down = make(*be, DType::kBF16, {E, D, F}, "experts' down");
    be->fill_normal(w_gu.t, 1, 0, 0.0f, 0.02f);
    be->fill_normal(w_down.t, 2, 0, 0.0f, 0.02f);
    kernels::GemmLt gemm;
    std::printf("# moe_bench on %s (%d SMs): D %lld, F %lld, %lld experts, top %lld, %lld rows per slot\n\n",
                dev.name.c_str(), dev.sm_count, static_cast<long long>(D), static_cast<long long>(F),
                static_cast<long long>(E), static_cast<long long>(k), static_cast<long long>(rows_per_slot));
    const bool cutlass = FLASHDLLM_BENCH_CUTLASS_GROUPED != 0;
    std::printf(
        "| slots | T | experts hit | grouped us | per-expert cuBLASLt us | grouped / per-expert |%s floor us | "
        "grouped / floor |\n|---:|---:|---:|---:|---:|---:|%s---:|---:|\n",
        cutlass ? " CUTLASS grouped us | CUTLASS / per-expert | CUTLASS rel. diff |" : "",
        cutlass ? "---:|---:|---:|" : "");
    nlohmann::json rows = nlohmann::json::array();
    for (long long S : slot_counts) {
      const int64_t T = S * rows_per_slot;
      Dev x = make(*be, DType::kBF16, {T, D}, "x"), logits = make(*be, DType::kF32, {T, E}, "router logits");
      Dev ids = make(*be, DType::kI32, {T, k}, "expert ids"), wts = make(*be, DType::kF32, {T, k}, "expert weights");
      Dev out = make(*be, DType::kBF16, {T, D}, "out");
      Dev scratch = make(*be, DType::kBF16, {Backend::moe_scratch_elements(T, k, E, D, F)}, "moe scratch");
      be->fill_normal(x.t, 3, static_cast<uint64_t>(S), 0.0f, 1.0f);
      be->fill_normal(logits.t, 4, static_cast<uint64_t>(S), 0.0f, 1.0f);
      be->moe_route(logits.t, Tensor{}, routing, ids.t, wts.t);
      const bench::Timing grouped = bench::time_launches(
          [&](int) { be->moe_experts(x.t, ids.t, wts.t, w_gu.t, w_down.t, out.t, false, scratch.t); }, stream, warmup,
          iters);
      // The per-expert side: rows gathered per expert (untimed), then two GEMMs and a SwiGLU each.
      std::vector<int32_t> host_ids(static_cast<size_t>(T * k));
      be->copy_to_host(host_ids.data(), ids.t);
      std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(E));
      for (int64_t i = 0; i < T * k; ++i)
        rows_of[static_cast<size_t>(host_ids[static_cast<size_t>(i)])].push_back(static_cast<int32_t>(i / k));
      int64_t hit = 0, max_rows = 0;
      for (const auto& r : rows_of) {
        hit += r.empty() ? 0 : 1;
        max_rows = std::max<int64_t>(max_rows, static_cast<int64_t>(r.size()));
      }
      Dev xe = make(*be, DType::kBF16, {T * k, D}, "gathered rows"),
          gu = make(*be, DType::kBF16, {max_rows, 2 * F}, "gu");
      Dev act = make(*be, DType::kBF16, {max_rows, F}, "act"), ye = make(*be, DType::kBF16, {T * k, D}, "expert out");
      Dev idx = make(*be, DType::kI32, {T * k}, "gather rows");
      std::vector<int32_t> order;
      std::vector<int64_t> begin;
      for (const auto& r : rows_of) {
        begin.push_back(static_cast<int64_t>(order.size()));
        order.insert(order.end(), r.begin(), r.end());
      }
      be->copy_from_host(idx.t, order.data());
      be->gather_rows(x.t, idx.t, xe.t);
      const auto* wg = w_gu.t.ptr<__nv_bfloat16>();
      const auto* wd = w_down.t.ptr<__nv_bfloat16>();
      const bench::Timing per_expert = bench::time_launches(
          [&](int) {
            for (int64_t e = 0; e < E; ++e) {
              const auto n = static_cast<int64_t>(rows_of[static_cast<size_t>(e)].size());
              if (n == 0) continue;
              const int64_t b = begin[static_cast<size_t>(e)];
              gemm.matmul(xe.t.ptr<__nv_bfloat16>() + b * D, wg + e * 2 * F * D, gu.t.data, kernels::GemmOut::kBF16, n,
                          2 * F, D, false, stream);
              kernels::swiglu_bf16(gu.t.ptr<__nv_bfloat16>(), n, F, act.t.ptr<__nv_bfloat16>(), stream);
              gemm.matmul(act.t.ptr<__nv_bfloat16>(), wd + e * D * F, ye.t.ptr<__nv_bfloat16>() + b * D,
                          kernels::GemmOut::kBF16, n, D, F, false, stream);
            }
          },
          stream, warmup, iters);
      nlohmann::json row = {{"slots", S}, {"T", T}, {"experts_hit", hit}};
      std::string cutlass_cols;
#if FLASHDLLM_BENCH_CUTLASS_GROUPED
      {
        // CUTLASS's grouped GEMMs on the same gathered rows: group offsets on the device.
        const int64_t M = T * k;
        std::vector<int32_t> offsets(begin.begin(), begin.end());
        offsets.push_back(static_cast<int32_t>(M));
        Dev off = make(*be, DType::kI32, {E + 1}, "group offsets");
        be->copy_from_host(off.t, offsets.data());
        Dev gu_all = make(*be, DType::kBF16, {M, 2 * F}, "gate|up, all rows"),
            act_all = make(*be, DType::kBF16, {M, F}, "SwiGLU, all rows"),
            yc = make(*be, DType::kBF16, {M, D}, "CUTLASS expert out");
        Dev cws = make(*be, DType::kI8, {static_cast<int64_t>(bench::cutlass_grouped_workspace(static_cast<int>(E)))},
                       "CUTLASS workspace");
        const bench::Timing grouped_cutlass = bench::time_launches(
            [&](int) {
              bench::cutlass_grouped_gemm_bf16(xe.t.ptr<__nv_bfloat16>(), wg, off.t.ptr<int32_t>(), static_cast<int>(E),
                                               static_cast<int>(2 * F), static_cast<int>(D),
                                               gu_all.t.ptr<__nv_bfloat16>(), cws.t.data, stream);
              kernels::swiglu_bf16(gu_all.t.ptr<__nv_bfloat16>(), M, F, act_all.t.ptr<__nv_bfloat16>(), stream);
              bench::cutlass_grouped_gemm_bf16(act_all.t.ptr<__nv_bfloat16>(), wd, off.t.ptr<int32_t>(),
                                               static_cast<int>(E), static_cast<int>(D), static_cast<int>(F),
                                               yc.t.ptr<__nv_bfloat16>(), cws.t.data, stream);
            },
            stream, warmup, iters);
        // Both sides' expert outputs, bf16 [M, D] in the same group order.
        std::vector<uint16_t> a(static_cast<size_t>(M * D)), b(a.size());
        be->copy_to_host(a.data(), yc.t);
        be->copy_to_host(b.data(), ye.t);
        double max_diff = 0, max_ref = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(bf16_to_f32(a[i]) - bf16_to_f32(b[i]))));
          max_ref = std::max(max_ref, static_cast<double>(std::fabs(bf16_to_f32(b[i]))));
        }
        const double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
        if (!(rel <= 1.0 / 64))
          throw std::runtime_error("CUTLASS grouped expert outputs differ from the per-expert ones by " +
                                   std::to_string(rel) + " of their largest magnitude (slots " + std::to_string(S) +
                                   ")");
        char buf[160];
        std::snprintf(buf, sizeof buf, " %.1f | %.2f | %.1e |", grouped_cutlass.median_us,
                      grouped_cutlass.median_us / per_expert.median_us, rel);
        cutlass_cols = buf;
        row["cutlass_grouped_us"] = grouped_cutlass.median_us;
        row["cutlass_rel_diff"] = rel;
      }
#endif
      const double flops = 2.0 * static_cast<double>(T * k) * 3.0 * static_cast<double>(D * F);
      const double bytes = static_cast<double>(hit) * 3.0 * static_cast<double>(D * F) * 2.0 +
                           static_cast<double>(T * D) * 2.0 * 2.0 +
                           static_cast<double>(T * k) * (2.0 * F * 2.0 * 2.0 + F * 2.0 * 2.0 + D * 4.0 * 2.0);
      const double floor_us = std::max(flops / (peak_tflops * 1e12), bytes / (peak_gbps * 1e9)) * 1e6;
      std::printf("| %lld | %lld | %lld | %.1f | %.1f | %.2f |%s %.1f | %.2f |\n", S, static_cast<long long>(T),
                  static_cast<long long>(hit), grouped.median_us, per_expert.median_us,
                  grouped.median_us / per_expert.median_us, cutlass_cols.c_str(), floor_us,
                  grouped.median_us / floor_us);
      row["grouped_us"] = grouped.median_us;
      row["per_expert_cublaslt_us"] = per_expert.median_us;
      row["floor_us"] = floor_us;
      row["floor_flops"] = flops;
      row["floor_bytes"] = bytes;
      rows.push_back(row);
    }
    bench::write_json(json_path, {{"bench", "moe_bench"},
                                  {"gpu", dev.name},
                                  {"commit", bench::commit_id()},
                                  {"d_model", D},
                                  {"expert_width", F},
                                  {"experts", E},
                                  {"top_k", k},
                                  {"rows_per_slot", rows_per_slot},
                                  {"peak_tflops", peak_tflops},
                                  {"peak_gbps", peak_gbps},
                                  {"rows", rows}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
