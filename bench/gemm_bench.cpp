// gemm_bench: the CUDA backend's cuBLASLt GEMM (kernels/cuda/gemm.h: bf16 in, fp32 accumulate)
// at one model's layer shapes (--model-config, a config.json any family parse_model_config reads;
// default LLaDA-8B-Instruct's), out[T, N] = x[T, K]·w[N, K]ᵀ, with D = d_model, F = mlp_hidden_size,
// H / Hkv query / K/V heads of head_dim hd (LLaDA-8B: D 4096, F 12288, 32 / 32 heads of 128):
//   qkv      N (H + 2·Hkv)·hd (fused q|k|v), K D, bf16 out
//   attn_out N D, K H·hd, bf16 out, accumulate (residual add in the epilogue)
//   gate_up  N 2·F (fused gate|up), K D, bf16 out
//   down     N D, K F, bf16 out, accumulate
//   lm_head  N embedding_size, K D, fp32 out (logits)
// for T in --tokens. TFLOP/s = 2·T·N·K / t against --peak-tflops; roofline floor
// max(flops / peak, bytes(x, w, out[, out read]) / bandwidth). Median of --iters measurements.
// --tune K also times a GemmLt that picks the fastest of cuBLASLt's first K heuristic algorithms
// (GemmLt's tune_candidates) on the same operands in the same run: its time, the speed-up over the
// heuristic's first choice, and which candidate won. --buckets pow2,exact also times GemmLts whose
// row buckets are powers of two / exact row counts (kernels::GemmBuckets) against the engine's
// default quarter octaves (the "median us" column).
// --write-picks FILE measures a pick table (backend/cuda/gemm_picks.h) for the engine's buckets: at
// every T that is a bucket's own row count, each of the heuristic's first --pick-candidates
// algorithms (GemmLt::set_picks) is timed; the fastest becomes the pick when it beats the first by
// more than --pick-margin in its measurement and again in a second, alternating one (noise guard).
// Only picks other than the first are written. Every GemmLt here runs without built-in picks: the
// "median us" column is the heuristic's first algorithm.
// --fp8 also times, on the same shapes, the block-FP8 product the engine's FP8-GEMM route runs
// (GemmLt::matmul_fp8: e4m3 weight with 128 x 128 scales, activations quantised per 1 x 128 group;
// T padded to kernels::fp8_padded_rows as the engine pads it) and, separately, the activation
// quantisation pass (kernels::quantize_fp8_groups_bf16, one launch per product in the engine):
// columns "fp8 us", "quant us" and "bf16 / (fp8 + quant)", the speed-up a product gets on that route.
// Where the build has CUTLASS's sm_90 block-scaled FP8 GEMM (bench/cutlass_fp8_blockwise.h), --fp8
// also times it on the same operands, data-parallel and stream-K ("cutlass fp8 us", "cutlass sk us")
// and reports its largest difference from cuBLASLt's product relative to max |product| ("vs cublaslt";
// one bf16 rounding apart at most when both are right: <= 2^-7).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/cuda_bench_util.h"
#if FLASHDLLM_BENCH_CUTLASS_FP8
#include "bench/cutlass_fp8_blockwise.h"
#endif
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/gemm.h"
#include "model/model_config.h"

using namespace flashdllm;
using namespace flashdllm::kernels;

namespace {

struct Shape {
  const char* name;
  int64_t N, K;
  GemmOut out;
  bool accumulate;
};

#if FLASHDLLM_BENCH_CUTLASS_FP8
/// gemm_bench --fp8's CUTLASS columns for one (shape, T): data-parallel and stream-K times, and the
/// largest |CUTLASS - cuBLASLt| / max |cuBLASLt| of the non-accumulating product on these operands
/// (weight scales ws with the row stride cuBLASLt reads, equal to CUTLASS's here: `applies`).
void cutlass_fp8_columns(bool applies, void* xq, void* xs, void* wq, void* ws, void* o, int64_t tp, int64_t N,
                         int64_t K, bool accumulate, int warmup, int iters, cudaStream_t stream, nlohmann::json& r) {
  if (!applies) {
    std::printf(" | - | - | -");
    return;
  }
  const auto* x8 = static_cast<const uint8_t*>(xq);
  const auto* w8 = static_cast<const uint8_t*>(wq);
  const auto* xsf = static_cast<const float*>(xs);
  const auto* wsf = static_cast<const float*>(ws);
  const int T = static_cast<int>(tp), n = static_cast<int>(N), k = static_cast<int>(K);
  void* workspace = nullptr;
  const size_t wbytes =
      std::max(bench::cutlass_fp8_blockwise_workspace(T, n, k, bench::CutlassFp8Schedule::kStreamK),
               bench::cutlass_fp8_blockwise_workspace(T, n, k, bench::CutlassFp8Schedule::kDataParallel));
  CUDA_CHECK(cudaMalloc(&workspace, std::max<size_t>(wbytes, 1)));
  void* ref = nullptr;
  CUDA_CHECK(cudaMalloc(&ref, static_cast<size_t>(tp * N) * 2));
  double us[2] = {0, 0}, worst = 0;
  try {
    for (int sched = 0; sched < 2; ++sched) {
      const auto sc = sched == 0 ? bench::CutlassFp8Schedule::kDataParallel : bench::CutlassFp8Schedule::kStreamK;
      us[sched] = bench::time_launches(
                      [&](int) {
                        bench::cutlass_fp8_blockwise(x8, xsf, w8, wsf, static_cast<__nv_bfloat16*>(o), T, n, k,
                                                     accumulate, sc, workspace, stream);
                      },
                      stream, warmup, iters, 2.0)
                      .median_us;
      // The check: both products without accumulation, on the same operands.
      GemmLt lt;
      if (!lt.matmul_fp8(x8, xsf, w8, wsf, ref, GemmOut::kBF16, tp, N, K, false, stream)) continue;
      bench::cutlass_fp8_blockwise(x8, xsf, w8, wsf, static_cast<__nv_bfloat16*>(o), T, n, k, false, sc, workspace,
                                   stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<uint16_t> a(static_cast<size_t>(tp * N)), b(a.size());
      CUDA_CHECK(cudaMemcpy(a.data(), ref, a.size() * 2, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(b.data(), o, b.size() * 2, cudaMemcpyDeviceToHost));
      const auto f = [](uint16_t h) {
        const uint32_t u = static_cast<uint32_t>(h) << 16;
        float v;
        std::memcpy(&v, &u, 4);
        return static_cast<double>(v);
      };
      double amax = 0, dmax = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        amax = std::max(amax, std::fabs(f(a[i])));
        dmax = std::max(dmax, std::fabs(f(a[i]) - f(b[i])));
      }
      worst = std::max(worst, amax > 0 ? dmax / amax : dmax);
    }
    std::printf(" | %.1f | %.1f | %.1e", us[0], us[1], worst);
    r["cutlass_fp8_median_us"] = us[0];
    r["cutlass_fp8_streamk_median_us"] = us[1];
    r["cutlass_vs_cublaslt_rel_max_diff"] = worst;
  } catch (const std::exception& e) {
    std::printf(" | failed | failed | -");
    std::fprintf(stderr, "%s\n", e.what());
  }
  CUDA_CHECK(cudaFree(workspace));
  CUDA_CHECK(cudaFree(ref));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuBLASLt GEMM microbenchmark at a model's layer shapes"};
  std::string tokens = "256,512,1024,2048,4096,8192,16384", shapes_sel = "qkv,attn_out,gate_up,down,lm_head";
  int warmup = 3, iters = 10, tune = 0;
  bool fp8 = false;
  double peak_tflops = 989.4, peak_gbps = 4800.0;
  std::string json_path, buckets_sel, picks_path, model_config = FDLLM_BENCH_DEFAULT_CONFIG;
  int pick_candidates = 8;
  double pick_margin = 0.03;
  app.add_option("--tokens", tokens, "comma-separated T (rows of x)");
  app.add_option("--model-config", model_config, "config.json whose layer shapes are measured (any family)");
  app.add_option("--shapes", shapes_sel, "subset of qkv,attn_out,gate_up,down,lm_head");
  app.add_option("--warmup", warmup, "warm-up launches")->check(CLI::Range(0, 1000));
  app.add_option("--iters", iters, "timed measurements (median reported)")->check(CLI::Range(1, 10000));
  app.add_option("--peak-tflops", peak_tflops, "dense bf16 peak (H200 SXM datasheet: 989.4)");
  app.add_option("--peak-gbps", peak_gbps, "memory bandwidth for the roofline floor (H200: 4800)");
  app.add_option("--json", json_path, "write results as JSON");
  app.add_option("--tune", tune, "also time GemmLt(tune_candidates = K) (0 = off)")->check(CLI::Range(0, 16));
  app.add_option("--buckets", buckets_sel, "also time other row buckets: subset of pow2,quarter,exact");
  app.add_flag("--fp8", fp8, "also time the block-FP8 product (GemmLt::matmul_fp8) and the activation quantisation");
  app.add_option("--write-picks", picks_path, "measure and write a GEMM pick table (JSON) for the engine's buckets");
  app.add_option("--pick-candidates", pick_candidates, "heuristic candidates timed per shape for --write-picks")
      ->check(CLI::Range(2, kMaxGemmCandidates));
  app.add_option("--pick-margin", pick_margin,
                 "fraction of the first candidate's time a pick must save, in both measurements (0.03 = 3%)")
      ->check(CLI::Range(0.0, 1.0));
  CLI11_PARSE(app, argc, argv);
  std::vector<std::pair<std::string, GemmBuckets>> other_buckets;
  for (const std::string& b : bench::split(buckets_sel)) {
    if (const auto rule = gemm_buckets_from_name(b))
      other_buckets.emplace_back(b, *rule);
    else {
      std::fprintf(stderr, "gemm_bench: --buckets: '%s' is not pow2, quarter or exact\n", b.c_str());
      return 2;
    }
  }

  try {
    const flashdllm::ModelConfig m = flashdllm::load_model_config(model_config);
    const int64_t hd = m.head_dim, D = m.d_model, F = m.mlp_hidden_size;
    const std::vector<Shape> all = {{"qkv", (m.n_heads + 2 * m.n_kv_heads) * hd, D, GemmOut::kBF16, false},
                                    {"attn_out", D, m.n_heads * hd, GemmOut::kBF16, true},
                                    {"gate_up", 2 * F, D, GemmOut::kBF16, false},
                                    {"down", D, F, GemmOut::kBF16, true},
                                    {"lm_head", m.embedding_size, D, GemmOut::kF32, false}};
    std::printf("shapes of %s (%s)\n", model_config.c_str(), flashdllm::family_name(m.family));
    const bench::DeviceInfo dev = bench::device_info();
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    GemmLt gemm;
    GemmLt tuned(kGemmWorkspaceBytes, tune);
    std::vector<std::unique_ptr<GemmLt>> bucketed;
    for (const auto& b : other_buckets) bucketed.push_back(std::make_unique<GemmLt>(kGemmWorkspaceBytes, 0, b.second));
    // --write-picks: pickers[k] serves every measured (shape, bucket T) with the heuristic's k-th.
    const GemmBuckets engine_buckets = GemmBuckets::kQuarterOctave;
    const std::vector<std::string> wanted = bench::split(shapes_sel);
    std::vector<long long> ts;  // --tokens without repeats, in order
    for (long long T : bench::parse_list(tokens))
      if (std::find(ts.begin(), ts.end(), T) == ts.end()) ts.push_back(T);
    if (ts.empty() || *std::min_element(ts.begin(), ts.end()) < 1)
      throw std::invalid_argument("--tokens '" + tokens + "' must be a comma-separated list of row counts >= 1");
    std::vector<std::unique_ptr<GemmLt>> pickers;
    if (!picks_path.empty()) {
      std::vector<long long> bucket_ts;  // the T that are their own bucket: the ones measured
      for (long long T : ts)
        if (gemm_bucket_rows(T, engine_buckets) == T)
          bucket_ts.push_back(T);
        else
          std::printf("--write-picks: T = %lld is not a %s bucket's row count (the next is %lld): not measured\n", T,
                      std::string(gemm_buckets_name(engine_buckets)).c_str(),
                      static_cast<long long>(gemm_bucket_rows(T, engine_buckets)));
      for (int k = 0; k < pick_candidates; ++k) {
        std::vector<GemmPick> all_k;
        for (const Shape& s : all)
          for (long long T : bucket_ts) all_k.push_back({T, s.N, s.K, s.out, s.accumulate, k});
        pickers.push_back(std::make_unique<GemmLt>(kGemmWorkspaceBytes, 0, engine_buckets));
        pickers.back()->set_picks(all_k);
      }
    }
    nlohmann::json table;
    table["device"] = dev.name;
    table["sm_count"] = dev.sm_count;
    table["cublaslt_version"] = GemmLt::library_version();
    table["workspace_bytes"] = kGemmWorkspaceBytes;  // the pickers' workspace, the engine's
    table["buckets"] = gemm_buckets_name(engine_buckets);
    table["measured"] = {{"commit", bench::commit_id()},
                         {"by", "bench/gemm_bench --write-picks"},
                         {"pick_candidates", pick_candidates},
                         {"pick_margin", pick_margin}};
    table["picks"] = nlohmann::json::array();
    nlohmann::json out;
    out["bench"] = "gemm";
    out["device"] = dev.name;
    out["commit"] = bench::commit_id();
    out["peak_tflops"] = peak_tflops;
    out["peak_gbps"] = peak_gbps;
    out["results"] = nlohmann::json::array();
    std::printf("device: %s (%d SMs), peak %.1f TFLOP/s\n\n", dev.name.c_str(), dev.sm_count, peak_tflops);
    std::string header = "| shape | T | N | K | out | median us | TFLOP/s | % peak | floor us |",
                rule = "|---|---|---|---|---|---|---|---|---|";
    if (tune > 0) {
      header += " tuned us | speed-up | pick |";
      rule += "---|---|---|";
    }
    if (!pickers.empty()) {
      header += " best candidate | its us | speed-up | picked |";
      rule += "---|---|---|---|";
    }
    for (const auto& b : other_buckets) {
      header += " " + b.first + " us | speed-up |";
      rule += "---|---|";
    }
    if (fp8) {
      header += " fp8 us | quant us | bf16 / (fp8 + quant) |";
      rule += "---|---|---|";
#if FLASHDLLM_BENCH_CUTLASS_FP8
      header += " cutlass fp8 us | cutlass sk us | vs cublaslt |";
      rule += "---|---|---|";
#endif
    }
    std::printf("%s\n%s\n", header.c_str(), rule.c_str());
    for (const Shape& s : all) {
      if (std::find(wanted.begin(), wanted.end(), s.name) == wanted.end()) continue;
      const int64_t t_max = *std::max_element(ts.begin(), ts.end());
      const size_t out_esize = s.out == GemmOut::kF32 ? 4 : 2;
      void *x = nullptr, *w = nullptr, *o = nullptr;
      CUDA_CHECK(cudaMalloc(&x, static_cast<size_t>(t_max * s.K) * 2));
      CUDA_CHECK(cudaMalloc(&w, static_cast<size_t>(s.N * s.K) * 2));
      const int64_t o_rows = fp8 ? fp8_padded_rows(t_max) : t_max;  // --fp8 writes T padded to 16 rows
      CUDA_CHECK(cudaMalloc(&o, static_cast<size_t>(o_rows * s.N) * out_esize));
      fill_uniform_bf16(static_cast<__nv_bfloat16*>(x), t_max * s.K, 1, -1.0f, 1.0f, stream);
      fill_uniform_bf16(static_cast<__nv_bfloat16*>(w), s.N * s.K, 2, -0.02f, 0.02f, stream);
      CUDA_CHECK(cudaMemsetAsync(o, 0, static_cast<size_t>(o_rows * s.N) * out_esize, stream));
      // --fp8 operands: the weight quantised per 1 x 128 group (valid e4m3 bytes; the timing does not
      // depend on the scale values), 128 x 128 scales N(1, 0.25^2) with the row stride cuBLASLt reads (distinct,
      // so that a scale layout mistake shows in the CUTLASS check).
      void *wq = nullptr, *ws = nullptr, *xq = nullptr, *xs = nullptr, *ows = nullptr;
      const int64_t t_pad = fp8_padded_rows(t_max), kb = (s.K + 127) / 128, nb = (s.N + 127) / 128;
      const int64_t ws_ld = (kb + kCublasFp8Scales.weight_ld_align - 1) / kCublasFp8Scales.weight_ld_align *
                            kCublasFp8Scales.weight_ld_align;
      if (fp8) {
        CUDA_CHECK(cudaMalloc(&wq, static_cast<size_t>(s.N * s.K)));
        CUDA_CHECK(cudaMalloc(&ows, static_cast<size_t>(s.N * kb) * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&ws, static_cast<size_t>(nb * ws_ld) * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&xq, static_cast<size_t>(t_pad * s.K)));
        CUDA_CHECK(cudaMalloc(&xs, static_cast<size_t>(kb * t_pad) * sizeof(float)));
        quantize_fp8_groups_bf16(static_cast<const __nv_bfloat16*>(w), static_cast<uint8_t*>(wq),
                                 static_cast<float*>(ows), s.N, s.K, Fp8ActScaleLayout{false, 0}, stream);
        fill_normal_f32(static_cast<float*>(ws), nb * ws_ld, 3, 0, 1.0f, 0.25f, stream);  // ~1, distinct
        CUDA_CHECK(cudaMemsetAsync(xq, 0, static_cast<size_t>(t_pad * s.K), stream));
        CUDA_CHECK(cudaMemsetAsync(xs, 0, static_cast<size_t>(kb * t_pad) * sizeof(float), stream));
      }
      for (long long T : ts) {
        const bench::Timing t = bench::time_launches(
            [&](int) {
              gemm.matmul(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), o, s.out, T,
                          s.N, s.K, s.accumulate, stream);
            },
            stream, warmup, iters, 2.0);
        const double flops = 2.0 * static_cast<double>(T) * s.N * s.K;
        const double bytes = 2.0 * (T * s.K + s.N * s.K) + static_cast<double>(out_esize) * T * s.N * (s.accumulate ? 2 : 1);
        const double floor_us = std::max(flops / (peak_tflops * 1e12), bytes / (peak_gbps * 1e9)) * 1e6;
        const double tflops = flops / (t.median_us * 1e-6) / 1e12;
        std::printf("| %s | %lld | %lld | %lld | %s | %.1f | %.1f | %.1f | %.1f", s.name, T,
                    static_cast<long long>(s.N), static_cast<long long>(s.K), s.out == GemmOut::kF32 ? "F32" : "BF16",
                    t.median_us, tflops, 100.0 * tflops / peak_tflops, floor_us);
        nlohmann::json r;
        if (tune > 0) {
          const auto call = [&](int) {
            tuned.matmul(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), o, s.out, T, s.N,
                         s.K, s.accumulate, stream);
          };
          call(0);  // the first call tunes (timed separately from the measurement)
          const GemmLt::Choice c = tuned.last_choice();
          const bench::Timing tt = bench::time_launches(call, stream, warmup, iters, 2.0);
          std::printf(" | %.1f | %.3f | %d of %d", tt.median_us, t.median_us / tt.median_us, c.index, c.candidates);
          r["tuned_median_us"] = tt.median_us;
          r["tuned_pick"] = c.index;
          r["tuned_candidates"] = c.candidates;
        }
        for (size_t i = 0; i < bucketed.size(); ++i) {
          const bench::Timing bt = bench::time_launches(
              [&](int) {
                bucketed[i]->matmul(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), o,
                                    s.out, T, s.N, s.K, s.accumulate, stream);
              },
              stream, warmup, iters, 2.0);
          std::printf(" | %.1f | %.3f", bt.median_us, t.median_us / bt.median_us);
          r["buckets_us"][other_buckets[i].first] = bt.median_us;
          r["bucket_rows"][other_buckets[i].first] = gemm_bucket_rows(T, other_buckets[i].second);
        }
        if (fp8) {
          const int64_t tp = fp8_padded_rows(T);
          const auto quant = [&](int) {
            quantize_fp8_groups_bf16(static_cast<const __nv_bfloat16*>(x), static_cast<uint8_t*>(xq),
                                     static_cast<float*>(xs), T, s.K, Fp8ActScaleLayout{true, tp}, stream);
          };
          quant(0);
          bool ran = true;
          const bench::Timing ft = bench::time_launches(
              [&](int) {
                ran = gemm.matmul_fp8(static_cast<const uint8_t*>(xq), static_cast<const float*>(xs),
                                      static_cast<const uint8_t*>(wq), static_cast<const float*>(ws), o, s.out, tp, s.N,
                                      s.K, s.accumulate, stream) &&
                      ran;
              },
              stream, warmup, iters, 2.0);
          const bench::Timing qt = bench::time_launches(quant, stream, warmup, iters, 2.0);
          if (ran) {
            std::printf(" | %.1f | %.1f | %.3f", ft.median_us, qt.median_us,
                        t.median_us / (ft.median_us + qt.median_us));
            r["fp8_median_us"] = ft.median_us;
            r["fp8_quant_median_us"] = qt.median_us;
            r["fp8_padded_rows"] = tp;
          } else {
            std::printf(" | none | %.1f | -", qt.median_us);
          }
#if FLASHDLLM_BENCH_CUTLASS_FP8
          cutlass_fp8_columns(s.out == GemmOut::kBF16 && ran && s.K % 128 == 0 && ws_ld == kb, xq, xs, wq, ws, o, tp,
                              s.N, s.K, s.accumulate, warmup, iters, stream, r);
#endif
        }
        if (!pickers.empty() && gemm_bucket_rows(T, engine_buckets) == T) {
          const auto timed = [&](int k) {
            return bench::time_launches(
                       [&](int) {
                         pickers[k]->matmul(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w),
                                            o, s.out, T, s.N, s.K, s.accumulate, stream);
                       },
                       stream, warmup, iters, 2.0)
                .median_us;
          };
          std::vector<double> us(pickers.size(), 0.0);
          int best = 0;
          for (int k = 0; k < static_cast<int>(pickers.size()); ++k) {
            us[k] = timed(k);
            // A candidate the heuristic does not list falls back to the first: not a candidate.
            if (k > 0 && pickers[k]->last_choice().index != k) us[k] = 0.0;
            if (us[k] > 0.0 && us[k] < us[best]) best = k;
          }
          bool picked = best > 0 && us[best] < (1.0 - pick_margin) * us[0];
          double again0 = 0.0, again_best = 0.0;
          if (picked) {  // the second, alternating measurement must agree
            again0 = timed(0);
            again_best = timed(best);
            picked = again_best < (1.0 - pick_margin) * again0;
          }
          std::printf(" | %d | %.1f | %.3f | %s", best, us[best], us[0] / us[best], picked ? "yes" : "no");
          r["candidates_us"] = us;
          r["best_candidate"] = best;
          if (picked) {
            const double speedup = (us[0] + again0) / (us[best] + again_best);
            table["picks"].push_back({{"shape", s.name},
                                      {"rows", T},
                                      {"N", s.N},
                                      {"K", s.K},
                                      {"out", s.out == GemmOut::kF32 ? "F32" : "BF16"},
                                      {"accumulate", s.accumulate},
                                      {"candidate", best},
                                      {"speedup", std::round(speedup * 1000.0) / 1000.0}});
          }
        }
        std::printf(" |\n");
        std::fflush(stdout);
        r["shape"] = s.name;
        r["T"] = T;
        r["N"] = s.N;
        r["K"] = s.K;
        r["out"] = s.out == GemmOut::kF32 ? "F32" : "BF16";
        r["accumulate"] = s.accumulate;
        r["median_us"] = t.median_us;
        r["min_us"] = t.min_us;
        r["max_us"] = t.max_us;
        r["tflops"] = tflops;
        r["pct_peak"] = 100.0 * tflops / peak_tflops;
        r["floor_us"] = floor_us;
        out["results"].push_back(r);
      }
      CUDA_CHECK(cudaFree(x));
      CUDA_CHECK(cudaFree(w));
      CUDA_CHECK(cudaFree(o));
      for (void* p : {wq, ws, xq, xs, ows})
        if (p) CUDA_CHECK(cudaFree(p));
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
    // Row buckets (kernels/cuda/gemm.h): one heuristic query per shape and row bucket of T.
    std::printf("\ncuBLASLt (untuned GemmLt): %zu plans, %zu heuristic queries\n", gemm.cached_plans(),
                gemm.heuristic_queries());
    out["plans"] = gemm.cached_plans();
    out["heuristic_queries"] = gemm.heuristic_queries();
    bench::write_json(json_path, out);
    if (!picks_path.empty()) {
      std::ofstream f(picks_path);
      f << table.dump(1) << "\n";
      if (!f) throw std::runtime_error("cannot write " + picks_path);
      std::printf("wrote %zu picks to %s\n", table["picks"].size(), picks_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
