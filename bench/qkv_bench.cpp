// qkv_bench: the CUDA paths of Backend::qkv_rope_store at LLaDA-8B shape (d_model 4096, 32 heads ×
// 128), issue 13 item 2:
//   gemm     the bare cuBLASLt GEMM xn·wqkvᵀ -> [T, 12288] bf16 (the floor the fused kernel is held to)
//   unfused  that GEMM, then rope_store_bf16 (RoPE on q, k; k, v scattered to their store rows)
//   fused    qkv_rope_store_fused_bf16 (sm_90 CUTLASS GEMM with the RoPE/store epilogue, no
//            intermediate), every tile configuration and the automatic choice
// Shapes: Flash-Cache windows (--rows-per-slot query rows per slot, default β_t + β_m = 128, for
// --slots) and prefill (--prefill-tokens). Store rows are scattered over a store of 128 slots × 1024
// rows (--store-rows shuffled), or token t's row is t (sequential: a prefill's layout), positions
// over [0, 1024). Each fused configuration is first checked against the unfused
// path (max |Δ| over q and the written K/V rows, relative to max |ref|). Median of --iters
// event-timed measurements; configurations alternate within a shape.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "bench/kernels/qkv_rope_fused.h"
#if FLASHDLLM_BENCH_CUTLASS_REF
#include "bench/cutlass_gemm_ref.h"
#endif
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/rope_store.h"

using namespace flashdllm;
using namespace flashdllm::kernels;

namespace {

constexpr int64_t kD = 4096, kHeads = 32, kDh = 128, kHD = kHeads * kDh, kPositions = 1024, kStoreRows = 128 * 1024;

template <class T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T*>(p);
}

std::vector<float> to_float(const __nv_bfloat16* d, size_t n) {
  std::vector<__nv_bfloat16> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

#if FLASHDLLM_BENCH_CUTLASS_REF
constexpr bench::RefEpilogue kRefEpilogues[] = {bench::RefEpilogue::kTma, bench::RefEpilogue::kTmaCarved,
                                                bench::RefEpilogue::kNoSmem};

// "cutlass gemm <epilogue> (<stages> stages)".
std::string ref_name(bench::RefEpilogue e) {
  const char* kind = e == bench::RefEpilogue::kTma         ? "tma-epilogue"
                     : e == bench::RefEpilogue::kTmaCarved ? "tma-epilogue carved"
                                                           : "nosmem-epilogue";
  return std::string("cutlass gemm ") + kind + " (" + std::to_string(bench::cutlass_gemm_ref_stages(e)) + " stages)";
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fused vs unfused QKV projection + RoPE + K/V store at LLaDA-8B shape"};
  std::string slots = "1,2,4,8,16,32,64", prefill = "256,1024,4096,8192";
  int rows_per_slot = 128, warmup = 3, iters = 10;
  std::string json_path, store_rows = "shuffled";
  app.add_option("--slots", slots, "window shapes: slot counts (T = slots × rows-per-slot)");
  app.add_option("--rows-per-slot", rows_per_slot, "query rows per slot (β_t + β_m)");
  app.add_option("--prefill-tokens", prefill, "prefill shapes: T");
  app.add_option("--warmup", warmup, "warm-up launches");
  app.add_option("--iters", iters, "timed measurements (median reported)");
  app.add_option("--json", json_path, "write results as JSON");
  app.add_option("--store-rows", store_rows, "K/V store rows of the tokens: shuffled | sequential")
      ->check(CLI::IsMember({"shuffled", "sequential"}));
  CLI11_PARSE(app, argc, argv);

  try {
    const bench::DeviceInfo dev = bench::device_info();
    std::vector<std::pair<std::string, long long>> shapes;
    for (long long s : bench::parse_list(slots)) shapes.emplace_back("window " + std::to_string(s) + " slots", s * rows_per_slot);
    for (long long t : bench::parse_list(prefill)) shapes.emplace_back("prefill", t);
    long long t_max = 1;
    for (const auto& s : shapes) t_max = std::max(t_max, s.second);

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    auto* x = dev_alloc<__nv_bfloat16>(static_cast<size_t>(t_max * kD));
    auto* w = dev_alloc<__nv_bfloat16>(static_cast<size_t>(3 * kHD * kD));
    auto* scratch = dev_alloc<__nv_bfloat16>(static_cast<size_t>(t_max * 3 * kHD));
    auto* q1 = dev_alloc<__nv_bfloat16>(static_cast<size_t>(t_max * kHD));
    auto* q2 = dev_alloc<__nv_bfloat16>(static_cast<size_t>(t_max * kHD));
    auto* k1 = dev_alloc<__nv_bfloat16>(static_cast<size_t>(kStoreRows * kHD));
    auto* v1 = dev_alloc<__nv_bfloat16>(static_cast<size_t>(kStoreRows * kHD));
    auto* k2 = dev_alloc<__nv_bfloat16>(static_cast<size_t>(kStoreRows * kHD));
    auto* v2 = dev_alloc<__nv_bfloat16>(static_cast<size_t>(kStoreRows * kHD));
    auto* cs = dev_alloc<float>(static_cast<size_t>(kPositions * kDh / 2));
    auto* sn = dev_alloc<float>(static_cast<size_t>(kPositions * kDh / 2));
    auto* pos = dev_alloc<int32_t>(static_cast<size_t>(t_max));
    auto* rows = dev_alloc<int32_t>(static_cast<size_t>(t_max));
    int* flags = dev_alloc<int>(1);
    CUDA_CHECK(cudaMemset(flags, 0, sizeof(int)));
    fill_uniform_bf16(x, t_max * kD, 1, -1.0f, 1.0f, stream);
    fill_uniform_bf16(w, 3 * kHD * kD, 2, -0.02f, 0.02f, stream);
    {  // RoPE tables (θ 500000) and scattered positions / distinct store rows
      std::vector<float> c(static_cast<size_t>(kPositions * kDh / 2)), s(c.size());
      for (int64_t i = 0; i < kDh / 2; ++i) {
        const double inv = 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / kDh);
        for (int64_t p = 0; p < kPositions; ++p) {
          c[static_cast<size_t>(p * kDh / 2 + i)] = static_cast<float>(std::cos(static_cast<double>(p) * inv));
          s[static_cast<size_t>(p * kDh / 2 + i)] = static_cast<float>(std::sin(static_cast<double>(p) * inv));
        }
      }
      CUDA_CHECK(cudaMemcpy(cs, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(sn, s.data(), s.size() * 4, cudaMemcpyHostToDevice));
      std::mt19937 rng(7);
      std::vector<int32_t> p(static_cast<size_t>(t_max)), r(static_cast<size_t>(kStoreRows));
      for (auto& v : p) v = static_cast<int32_t>(rng() % kPositions);
      std::iota(r.begin(), r.end(), 0);
      if (store_rows == "shuffled") std::shuffle(r.begin(), r.end(), rng);
      CUDA_CHECK(cudaMemcpy(pos, p.data(), p.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(rows, r.data(), p.size() * 4, cudaMemcpyHostToDevice));
    }
    GemmLt gemm;
    auto unfused = [&](int64_t T, __nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v) {
      gemm.matmul(x, w, scratch, GemmOut::kBF16, T, 3 * kHD, kD, false, stream);
      RopeStoreArgs a;
      a.qkv = scratch;
      a.positions = pos;
      a.rows = rows;
      a.cos = cs;
      a.sin = sn;
      a.q_out = q;
      a.k_store = k;
      a.v_store = v;
      a.tokens = T;
      a.n_heads = kHeads;
      a.head_dim = kDh;
      a.max_positions = kPositions;
      a.store_rows = kStoreRows;
      a.error_flags = flags;
      rope_store_bf16(a, stream);
    };
    auto fused = [&](int64_t T, __nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v, QkvConfig cfg) {
      FusedQkvArgs a;
      a.xn = x;
      a.wqkv = w;
      a.positions = pos;
      a.rows = rows;
      a.cos = cs;
      a.sin = sn;
      a.q_out = q;
      a.k_store = k;
      a.v_store = v;
      a.tokens = T;
      a.d_model = kD;
      a.n_heads = kHeads;
      a.head_dim = kDh;
      a.max_positions = kPositions;
      a.store_rows = kStoreRows;
      a.error_flags = flags;
      qkv_rope_store_fused_bf16(a, stream, cfg);
    };
    // Every tile × scheduler walk (swizzle 1 / 4, M or N fastest), then the automatic choice.
    std::vector<QkvConfig> configs;
    for (QkvTile t : kQkvTiles)
      for (int sw : {1, 4})
        for (bool along_n : {false, true}) configs.push_back({t, sw, along_n});
    configs.push_back({});
    auto config_name = [](const QkvConfig& c) {
      if (c.tile == QkvTile::kAuto) return std::string("auto");
      return std::string(qkv_tile_name(c.tile)) + " (" + std::to_string(qkv_fused_stages(c.tile)) + " stages) s" +
             std::to_string(c.swizzle) + (c.along_n ? " N" : " M");
    };
    if (!qkv_rope_fused_available())
      throw std::runtime_error("the fused QKV kernel does not run here (sm_90 + CUTLASS build)");

    // The rows compared: q rows [0, min(T, 512)) and the store rows of every 7th of those tokens.
    auto checked_store_rows = [&](int64_t T) {
      std::vector<int32_t> hr(static_cast<size_t>(std::min<long long>(T, 512)));
      CUDA_CHECK(cudaMemcpy(hr.data(), rows, hr.size() * 4, cudaMemcpyDeviceToHost));
      std::vector<int64_t> out_rows;
      for (size_t t = 0; t < hr.size(); t += 7) out_rows.push_back(hr[t]);
      return out_rows;
    };
    // Poisons what compare() reads of the fused outputs (NaN), so that an unwritten row shows.
    auto poison_fused = [&](int64_t T) {
      CUDA_CHECK(cudaMemsetAsync(q2, 0xff, static_cast<size_t>(T * kHD) * 2, stream));
      for (int64_t r : checked_store_rows(T)) {
        CUDA_CHECK(cudaMemsetAsync(k2 + r * kHD, 0xff, kHD * 2, stream));
        CUDA_CHECK(cudaMemsetAsync(v2 + r * kHD, 0xff, kHD * 2, stream));
      }
    };
    // max |Δ| / max |ref| between the unfused outputs (q1, k1, v1) and the fused ones (q2, k2, v2);
    // NaN if any compared value differs by NaN.
    auto compare = [&](int64_t T) {
      const auto n_check = static_cast<size_t>(std::min<long long>(T, 512));
      double max_ref = 0, max_diff = 0;
      bool nan = false;
      auto acc = [&](const std::vector<float>& ra, const std::vector<float>& rb) {
        for (size_t i = 0; i < ra.size(); ++i) {
          const double d = std::abs(static_cast<double>(ra[i]) - rb[i]);
          nan = nan || std::isnan(d);
          max_ref = std::max(max_ref, static_cast<double>(std::abs(ra[i])));
          max_diff = std::max(max_diff, d);
        }
      };
      acc(to_float(q1, n_check * kHD), to_float(q2, n_check * kHD));
      for (const auto& [sa, sb] : {std::pair{k1, k2}, std::pair{v1, v2}})
        for (int64_t r : checked_store_rows(T)) acc(to_float(sa + r * kHD, kHD), to_float(sb + r * kHD, kHD));
      if (nan) return std::nan("");
      return max_ref > 0 ? max_diff / max_ref : 0.0;
    };

    nlohmann::json out;
    out["bench"] = "qkv_rope_store";
    out["device"] = dev.name;
    out["commit"] = bench::commit_id();
    out["d_model"] = kD;
    out["n_heads"] = kHeads;
    out["head_dim"] = kDh;
    out["store_rows"] = store_rows;
    out["results"] = nlohmann::json::array();
    std::printf(
        "device: %s (%d SMs)\n\n| shape | T | path | us | / gemm | unfused / this |\n|---|---:|---|---:|---:|---:|\n",
        dev.name.c_str(), dev.sm_count);
    for (const auto& [name, T] : shapes) {
      // Agreement first: every fused configuration against the unfused path on the same inputs.
      unfused(T, q1, k1, v1);
      double rel = 0;
      for (const QkvConfig& c : configs) {
        poison_fused(T);
        fused(T, q2, k2, v2, c);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const double e = compare(T);
        if (!(e < 1e-2))
          throw std::runtime_error(name + ": fused " + config_name(c) + " differs from unfused (max rel " +
                                   std::to_string(e) + ")");
        rel = std::max(rel, e);
      }
#if FLASHDLLM_BENCH_CUTLASS_REF
      {  // the reference GEMMs against cuBLASLt's output (first rows of the scratch)
        const size_t n = static_cast<size_t>(std::min<long long>(T, 64) * 3 * kHD);
        gemm.matmul(x, w, scratch, GemmOut::kBF16, T, 3 * kHD, kD, false, stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));  // to_float copies on the default stream
        const std::vector<float> ref = to_float(scratch, n);
        for (bench::RefEpilogue e : kRefEpilogues) {
          bench::cutlass_gemm_ref(x, w, scratch, static_cast<int>(T), static_cast<int>(3 * kHD), static_cast<int>(kD),
                                  e, stream);
          CUDA_CHECK(cudaStreamSynchronize(stream));
          const std::vector<float> got = to_float(scratch, n);
          double mr = 0, md = 0;
          for (size_t i = 0; i < n; ++i) {
            mr = std::max(mr, static_cast<double>(std::abs(ref[i])));
            md = std::max(md, static_cast<double>(std::abs(ref[i] - got[i])));
          }
          if (!(md <= 1e-2 * mr)) throw std::runtime_error(name + ": the CUTLASS reference GEMM differs from cuBLASLt");
        }
      }
#endif
      int hflags = 0;
      CUDA_CHECK(cudaMemcpy(&hflags, flags, sizeof(int), cudaMemcpyDeviceToHost));
      if (hflags != 0) throw std::runtime_error("device error flags set: " + std::to_string(hflags));
      // Timing: the paths alternate round by round, so clock drift hits all alike.
      std::vector<std::pair<std::string, std::function<void()>>> runs = {
          {"gemm", [&] { gemm.matmul(x, w, scratch, GemmOut::kBF16, T, 3 * kHD, kD, false, stream); }},
          {"unfused", [&] { unfused(T, q1, k1, v1); }}};
#if FLASHDLLM_BENCH_CUTLASS_REF
      // The fused kernel's main loop with CUTLASS's own epilogues (plain GEMM into the scratch).
      for (bench::RefEpilogue e : kRefEpilogues)
        runs.emplace_back(ref_name(e), [&, e] {
          bench::cutlass_gemm_ref(x, w, scratch, static_cast<int>(T), static_cast<int>(3 * kHD), static_cast<int>(kD),
                                  e, stream);
        });
#endif
      for (const QkvConfig& c : configs)
        runs.emplace_back("fused " + config_name(c), [&, c] { fused(T, q2, k2, v2, c); });
      for (auto& run : runs) bench::time_launches([&](int) { run.second(); }, stream, warmup, 1, 2.0);  // warm-up
      std::vector<std::vector<double>> samples(runs.size());
      for (int it = 0; it < iters; ++it)
        for (size_t i = 0; i < runs.size(); ++i)
          samples[i].push_back(bench::time_launches([&](int) { runs[i].second(); }, stream, 0, 1, 2.0).median_us);
      nlohmann::json r;
      r["shape"] = name;
      r["T"] = T;
      r["max_rel_diff"] = rel;
      r["auto"] = config_name(qkv_fused_auto(T));
      double gemm_us = 0, unfused_us = 0;
      for (size_t i = 0; i < runs.size(); ++i) {
        std::sort(samples[i].begin(), samples[i].end());
        const double us = samples[i][samples[i].size() / 2];
        if (i == 0) gemm_us = us;
        if (i == 1) unfused_us = us;
        std::printf("| %s | %lld | %s | %.1f | %.3f | %.3f |\n", name.c_str(), T, runs[i].first.c_str(), us,
                    us / gemm_us, unfused_us > 0 ? unfused_us / us : 0.0);
        r["us"][runs[i].first] = us;
      }
      std::fflush(stdout);
      out["results"].push_back(r);
    }
    for (void* p : std::initializer_list<void*>{x, w, scratch, q1, q2, k1, v1, k2, v2, cs, sn, pos, rows, flags})
      CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaStreamDestroy(stream));
    bench::write_json(json_path, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
