// attention_bench: times the flash attention kernel alone (bidirectional, head_dim 128) on packed
// batches of equal-length sequences, the layout of a full-recompute forward:
//   q, k, v, out [B·L, H·128] bf16, block table = B tiles (b·L, (b+1)·L, b·L, (b+1)·L).
// For every (batch, seqlen) and flash variant: warm-up, then `iters` measurements of back-to-back
// launches between CUDA events over rotating input sets (> L2), median / min / max per launch;
// TFLOP/s = 4·B·H·L²·D / t, % of the given peak, and the roofline floor
// max(flops / peak, bytes(q, k, v, out) / bandwidth). The device-side plan (table -> work items)
// is timed separately (it runs once per attention call; the table is shared by all layers).
// --check compares each variant with the CUDA reference kernel (B == 1 shapes). Variant "cudnn"
// (prefill mode only) times the CUDA backend's cuDNN route on the same batch.
//
// --window-shapes S:Q:K,... times the Flash-Cache iteration's attention instead (issue 13): S slots,
// each with Q query rows (its window of --window-rows rows, then its tracked rows) over its own K
// keys (a store of S·K rows), in the block table flash_plan builds: query rows [W_0 T_0 | W_1 T_1 | …],
// one tile per slot (--tracked-tile-rows N: a window tile per slot, then the tracked sets in tiles of
// N rows, 16 = the released code's tiling). Every variant runs without and with the fused raw
// importance of the window rows (what layers >= 2 run). TFLOP/s count the useful work only:
// 4·S·H·Q·K·D. bench/window_attention.py puts cuDNN SDPA (S, Q, K) beside it.
//
// --verify-shapes T:R:K,... times the Flash-Verify pass's attention (attention_verify_flash) per
// CTA shape (--verify-ctas, kernels::VerifyCta), see run_verify_mode.
//
// Output: a markdown table on stdout, all numbers as JSON (--json).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench/attention_bench_util.h"
#include "bench/cuda_bench_util.h"
#include "core/verify_mask.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_verify.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fill.h"

using namespace flashdllm;
using namespace flashdllm::kernels;
using bench::check_flags;
using bench::DeviceBuffer;
using bench::InputSets;
using bench::kHeadDim;
using bench::max_rel_err;
using bench::parse_window_shapes;
using bench::to_float;
using bench::window_table;
using bench::WindowShape;

namespace {

FlashVariant parse_variant(const std::string& s) {
  for (FlashVariant v : {FlashVariant::kM64N64, FlashVariant::kWgmma128, FlashVariant::kWgmma64})
    if (s == flash_variant_name(v)) return v;
  throw std::runtime_error("unknown variant '" + s +
                           "' (m64n64, wgmma128, wgmma64; prefill mode also cudnn; the tile shapes no policy picks "
                           "are timed by attention_variants_bench)");
}

struct VerifyShape {
  long long tiles = 0, rows = 0, keys = 0;
};

std::vector<VerifyShape> parse_verify_shapes(const std::string& s, int n_cand) {
  std::vector<VerifyShape> out;
  for (const std::string& item : bench::split(s)) {
    VerifyShape v;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%lld:%lld:%lld%c", &v.tiles, &v.rows, &v.keys, &tail) != 3 || v.tiles < 1 ||
        v.rows < 2 * n_cand || v.rows < 1 || v.keys < 1)
      throw std::runtime_error("--verify-shapes: '" + item + "' is not T:R:K with positive integers and R >= 2 * " +
                               std::to_string(n_cand) + " (--verify-cand)");
    out.push_back(v);
  }
  return out;
}

/// Verify mode (--verify-shapes): the Flash-Verify pass's attention as the engine runs it. T tiles of
/// R query rows [kept | S drafts | S masks]; tile t gathers K keys from its slot's K + S store rows
/// (every row but S spread evenly: the candidates' positions, whose keys are the tile's own fresh
/// rows). Each CTA shape (VerifyCta) of attention_verify_flash is timed; on input set 0 its tile 0
/// is checked against an fp64 softmax of the same bf16 values (a throw beyond 2e-2 of the largest
/// output) and every row compared with the scalar verify kernel (attention_verify_bf16). GB/s counts
/// the bytes the pass must move: gathered K/V, the tiles' own K/V, Q and the output.
void run_verify_mode(const std::vector<VerifyShape>& shapes, int n_cand, int heads, const std::string& cta_list,
                     int warmup, int iters, double peak_gbps, cudaStream_t stream, nlohmann::json& out) {
  out["mode"] = "verify";
  out["n_cand"] = n_cand;
  std::printf(
      "| CTA (key split x min CTAs/SM) | rows per CTA | T | R | K | H | median us | min us | max us | GB/s | %% of "
      "%.0f | vs scalar | tile "
      "0 vs fp64 |\n",
      peak_gbps);
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const VerifyShape& v : shapes) {
    const int64_t width = static_cast<int64_t>(heads) * kHeadDim, qr = v.tiles * v.rows, slot = v.keys + n_cand;
    const int64_t kr = v.tiles * slot, n_keys = v.tiles * v.keys;
    const size_t qb = static_cast<size_t>(qr * width) * 2, kb = static_cast<size_t>(kr * width) * 2;
    const InputSets in(static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / (2 * qb + 2 * kb) + 1, 1, 8)), qr, kr,
                       heads, stream);
    DeviceBuffer k_tile(qb), v_tile(qb), ref_out(qb);
    fill_uniform_bf16(k_tile.as<__nv_bfloat16>(), qr * width, 4000, -1.0f, 1.0f, stream);
    fill_uniform_bf16(v_tile.as<__nv_bfloat16>(), qr * width, 5000, -1.0f, 1.0f, stream);
    std::vector<int32_t> table, key_rows;
    for (long long t = 0; t < v.tiles; ++t) {
      table.insert(table.end(), {static_cast<int32_t>(t * v.rows), static_cast<int32_t>((t + 1) * v.rows),
                                 static_cast<int32_t>(t * v.keys), static_cast<int32_t>((t + 1) * v.keys),
                                 static_cast<int32_t>(n_cand), 0});  // no source rows
      const int64_t step = n_cand > 0 ? slot / n_cand : slot + 1;  // candidate i at slot row i·step + step/2
      for (int64_t r = 0; r < slot; ++r)
        if (n_cand == 0 || r % step != step / 2 || r / step >= n_cand)
          key_rows.push_back(static_cast<int32_t>(t * slot + r));
    }
    if (static_cast<int64_t>(key_rows.size()) != n_keys) throw std::logic_error("verify mode: gather list size");
    DeviceBuffer table_d(table.size() * 4), rows_d(key_rows.size() * 4), flags_d(sizeof(int)), count_d(sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(table_d.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(rows_d.p, key_rows.data(), key_rows.size() * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(flags_d.p, 0, sizeof(int), stream));
    VerifyKeys vk;
    vk.table = table_d.as<int32_t>();
    vk.key_rows = rows_d.as<int32_t>();
    vk.k_tile = k_tile.as<__nv_bfloat16>();
    vk.v_tile = v_tile.as<__nv_bfloat16>();
    vk.error_flags = flags_d.as<int>();
    {  // the scalar kernel's output on set 0
      const AttentionArgs a = in.args(0);
      VerifyAttentionArgs r{a.q, a.k, a.v,    vk.key_rows, vk.k_tile, vk.v_tile, ref_out.as<__nv_bfloat16>(),
                            qr,  kr,  n_keys, heads,       kHeadDim,  a.scale};
      attention_verify_bf16(r, vk.table, v.tiles, flags_d.as<int>(), stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));  // to_float copies on the legacy stream
    }
    const std::vector<float> ref = to_float(ref_out, static_cast<size_t>(qr * width));
    // fp64 oracle of tile 0 (its R rows, every head) from the bf16 inputs of set 0, under
    // verify_may_attend (the first R·H·128 outputs).
    std::vector<double> oracle(static_cast<size_t>(v.rows * width));
    {
      const std::vector<float> q0 = to_float(*in.q[0], static_cast<size_t>(v.rows * width));
      const std::vector<float> k0 = to_float(*in.k[0], static_cast<size_t>(slot * width));
      const std::vector<float> v0 = to_float(*in.v[0], static_cast<size_t>(slot * width));
      const std::vector<float> kt = to_float(k_tile, static_cast<size_t>(v.rows * width));
      const std::vector<float> vt = to_float(v_tile, static_cast<size_t>(v.rows * width));
      const double sc = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
      for (int64_t r = 0; r < v.rows; ++r)
        for (int h = 0; h < heads; ++h) {
          std::vector<std::pair<const float*, const float*>> kvs;
          for (int64_t g = 0; g < v.keys; ++g)
            kvs.emplace_back(&k0[static_cast<size_t>(key_rows[static_cast<size_t>(g)] * width + h * kHeadDim)],
                             &v0[static_cast<size_t>(key_rows[static_cast<size_t>(g)] * width + h * kHeadDim)]);
          for (int64_t col = 0; col < v.rows; ++col)
            if (verify_may_attend(v.rows - 2 * n_cand, n_cand, r, col))
              kvs.emplace_back(&kt[static_cast<size_t>(col * width + h * kHeadDim)],
                               &vt[static_cast<size_t>(col * width + h * kHeadDim)]);
          std::vector<double> sv;
          double mx = -INFINITY;
          for (const auto& kvp : kvs) {
            double d = 0;
            for (int i = 0; i < kHeadDim; ++i)
              d += static_cast<double>(q0[static_cast<size_t>(r * width + h * kHeadDim + i)]) * kvp.first[i];
            sv.push_back(d * sc);
            mx = std::max(mx, d * sc);
          }
          double z = 0;
          for (const double x : sv) z += std::exp(x - mx);
          for (int i = 0; i < kHeadDim; ++i) {
            double acc = 0;
            for (size_t j = 0; j < kvs.size(); ++j) acc += std::exp(sv[j] - mx) / z * kvs[j].second[i];
            oracle[static_cast<size_t>(r * width + h * kHeadDim + i)] = acc;
          }
        }
    }
    const double scalar_err = max_rel_err(ref, oracle);
    std::printf("| (scalar kernel, tile 0 vs fp64: %.2e) |\n", scalar_err);
    const double bytes = 2.0 * width * (2.0 * static_cast<double>(n_keys) + 4.0 * static_cast<double>(qr));
    for (const std::string& shape : bench::split(cta_list)) {
      VerifyCta cta;
      char tail = 0;
      if (std::sscanf(shape.c_str(), "%dx%d%c", &cta.key_split, &cta.min_ctas_per_sm, &tail) != 2)
        throw std::runtime_error("--verify-ctas: '" + shape + "' is not KEYSPLITxMINCTAS");
      const int block_m = verify_block_m(cta);
      const int64_t capacity = attention_work_capacity(qr, v.tiles, block_m);
      DeviceBuffer work(static_cast<size_t>(capacity) * sizeof(AttentionWorkItem));
      attention_plan_verify(table_d.as<int32_t>(), v.tiles, qr, n_keys, block_m, work.as<AttentionWorkItem>(),
                            count_d.as<int32_t>(), capacity, flags_d.as<int>(), stream);
      auto run = [&](int s) {
        attention_verify_flash(in.args(s), vk, work.as<AttentionWorkItem>(), count_d.as<int32_t>(), capacity, stream,
                               cta);
      };
      run(0);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<float> got = to_float(*in.o[0], ref.size());
      const double rel_err = max_rel_err(got, ref), oracle_err = max_rel_err(got, oracle);
      const bench::Timing t = bench::time_launches([&](int i) { run(i % in.size()); }, stream, warmup, iters);
      check_flags(flags_d);
      const double gbps = bytes / (t.median_us * 1e-6) / 1e9;
      std::printf("| %s | %d | %lld | %lld | %lld | %d | %.1f | %.1f | %.1f | %.0f | %.1f | %.2e | %.2e |\n",
                  shape.c_str(), block_m, v.tiles, v.rows, v.keys, heads, t.median_us, t.min_us, t.max_us, gbps,
                  100.0 * gbps / peak_gbps, rel_err, oracle_err);
      std::fflush(stdout);
      if (!(oracle_err <= 2e-2))  // bf16 outputs: a few bf16 ulp of the largest at most
        throw std::runtime_error("verify mode: CTA " + shape + ": tile 0 differs from fp64 (rel err " +
                                 std::to_string(oracle_err) + ")");
      out["results"].push_back({{"key_split", cta.key_split},
                                {"min_ctas_per_sm", cta.min_ctas_per_sm},
                                {"block_m", block_m},
                                {"tiles", v.tiles},
                                {"rows", v.rows},
                                {"keys", v.keys},
                                {"n_cand", n_cand},
                                {"heads", heads},
                                {"median_us", t.median_us},
                                {"min_us", t.min_us},
                                {"max_us", t.max_us},
                                {"gbps", gbps},
                                {"rel_err_vs_scalar", rel_err},
                                {"tile0_rel_err_vs_fp64", oracle_err},
                                {"scalar_tile0_rel_err_vs_fp64", scalar_err},
                                {"ctas", capacity * heads},
                                {"input_sets", in.size()}});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Flash attention kernel microbenchmark (bidirectional, head_dim 128)"};
  std::string seqlens = "256,512,1024,2048,4096", batches = "1,8,32", variants = "m64n64";
  int heads = 32, warmup = 5, iters = 20;
  double peak_tflops = 989.4, peak_gbps = 4800.0;
  std::string json_path, window_shapes;
  int64_t window_rows = 16, tracked_tile_rows = 0;
  bool check = false;
  std::string verify_shapes, verify_ctas = "1x1,2x2,2x3";
  int verify_cand = 8;
  app.add_option("--seqlens", seqlens, "comma-separated sequence lengths L");
  app.add_option("--batches", batches, "comma-separated batch sizes B");
  app.add_option("--heads", heads, "attention heads H");
  app.add_option("--variants", variants, "flash variants to time (m64n64, wgmma128, wgmma64; prefill mode also cudnn)");
  app.add_option("--warmup", warmup, "warm-up launches");
  app.add_option("--iters", iters, "timed measurements (median reported)");
  app.add_option("--peak-tflops", peak_tflops, "dense bf16 peak for % of peak (H200 SXM datasheet: 989.4)");
  app.add_option("--peak-gbps", peak_gbps, "memory bandwidth for the roofline floor (H200: 4800)");
  app.add_option("--json", json_path, "write results as JSON");
  app.add_flag("--check", check, "compare each variant with the reference kernel on B == 1 shapes");
  app.add_option("--window-shapes", window_shapes,
                 "Flash-Cache iteration shapes S:Q:K,... (slots, query rows per slot, keys per slot) instead of "
                 "packed batches");
  app.add_option("--window-rows", window_rows, "window mode: rows of each slot's window tile (importance)")
      ->check(CLI::PositiveNumber);
  app.add_option("--tracked-tile-rows", tracked_tile_rows,
                 "window mode: rows per tracked tile (0 = one tile per tracked set; 16 = the released tiling)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--verify-shapes", verify_shapes,
                 "Flash-Verify pass shapes T:R:K,... (tiles, query rows per tile, gathered keys per tile) instead "
                 "of packed batches");
  app.add_option("--verify-cand", verify_cand, "verify mode: candidates S per tile (R >= 2S)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--verify-ctas", verify_ctas,
                 "verify mode: CTA shapes to time, KEYSPLITxMINCTAS (kernels::VerifyCta; built: 1x1, 2x2, 2x3)");
  CLI11_PARSE(app, argc, argv);

  try {
    const bench::DeviceInfo dev = bench::device_info();
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    nlohmann::json out;
    out["bench"] = "attention";
    out["device"] = dev.name;
    out["sm_count"] = dev.sm_count;
    out["commit"] = bench::commit_id();
    out["peak_tflops"] = peak_tflops;
    out["peak_gbps"] = peak_gbps;
    out["heads"] = heads;
    out["head_dim"] = kHeadDim;
    out["results"] = nlohmann::json::array();

    std::printf("device: %s (%d SMs), peak %.1f TFLOP/s, %.0f GB/s\n\n", dev.name.c_str(), dev.sm_count, peak_tflops,
                peak_gbps);
    if (!verify_shapes.empty()) {
      run_verify_mode(parse_verify_shapes(verify_shapes, verify_cand), verify_cand, heads, verify_ctas, warmup, iters,
                      peak_gbps, stream, out);
      CUDA_CHECK(cudaStreamDestroy(stream));
      bench::write_json(json_path, out);
      return 0;
    }
    if (!window_shapes.empty()) {
      out["mode"] = "window";
      out["window_rows"] = window_rows;
      out["tracked_tile_rows"] = tracked_tile_rows;
      std::printf(
          "| variant | S | Q | K | H | tiles | importance | median us | min us | max us | TFLOP/s | %% peak |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
      for (const WindowShape& w : parse_window_shapes(window_shapes)) {
        const int64_t width = static_cast<int64_t>(heads) * kHeadDim, qr = w.slots * w.q, kr = w.slots * w.k;
        const size_t qb = static_cast<size_t>(qr * width) * 2, kb = static_cast<size_t>(kr * width) * 2;
        const InputSets in(static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / (2 * qb + 2 * kb) + 1, 1, 8)), qr,
                           kr, heads, stream);
        int64_t n_tiles = 0;
        const std::vector<int32_t> table = window_table(w, window_rows, tracked_tile_rows, n_tiles);
        DeviceBuffer table_d(table.size() * 4), flags_d(sizeof(int)), count_d(sizeof(int32_t));
        DeviceBuffer scores(static_cast<size_t>(kr) * sizeof(float));
        CUDA_CHECK(cudaMemcpyAsync(table_d.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemsetAsync(flags_d.p, 0, sizeof(int), stream));
        CUDA_CHECK(cudaMemsetAsync(scores.p, 0, static_cast<size_t>(kr) * sizeof(float), stream));
        const double flops =
            4.0 * static_cast<double>(w.slots) * heads * static_cast<double>(w.q) * static_cast<double>(w.k) * kHeadDim;
        for (const std::string& vname : bench::split(variants)) {
          const FlashVariant var = parse_variant(vname);
          const int block_m = flash_block_m(var);
          const int64_t capacity = attention_work_capacity(qr, n_tiles, block_m);
          DeviceBuffer work(static_cast<size_t>(capacity) * sizeof(AttentionWorkItem));
          attention_plan(table_d.as<int32_t>(), n_tiles, qr, kr, block_m, work.as<AttentionWorkItem>(),
                         count_d.as<int32_t>(), capacity, flags_d.as<int>(), stream);
          for (const bool importance : {false, true}) {
            const bench::Timing t = bench::time_launches(
                [&](int i) {
                  AttentionArgs a = in.args(i % in.size());
                  if (importance) {
                    a.importance = scores.as<float>();
                    a.importance_weight = 1.0f / static_cast<float>(window_rows * heads);
                    a.table = table_d.as<int32_t>();
                    a.score_tiles = table_d.as<int32_t>() + 4 * n_tiles;
                    a.n_score_tiles = static_cast<int32_t>(w.slots);
                    a.error_flags = flags_d.as<int>();
                  }
                  attention_flash(a, var, work.as<AttentionWorkItem>(), count_d.as<int32_t>(), capacity, stream);
                },
                stream, warmup, iters);
            check_flags(flags_d);
            const double tflops = flops / (t.median_us * 1e-6) / 1e12;
            std::printf("| %s | %lld | %lld | %lld | %d | %lld | %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                        vname.c_str(), w.slots, w.q, w.k, heads, static_cast<long long>(n_tiles),
                        importance ? "yes" : "no", t.median_us, t.min_us, t.max_us, tflops,
                        100.0 * tflops / peak_tflops);
            std::fflush(stdout);
            out["results"].push_back({{"variant", vname},
                                      {"slots", w.slots},
                                      {"q_rows", w.q},
                                      {"keys", w.k},
                                      {"heads", heads},
                                      {"tiles", n_tiles},
                                      {"importance", importance},
                                      {"median_us", t.median_us},
                                      {"min_us", t.min_us},
                                      {"max_us", t.max_us},
                                      {"tflops", tflops},
                                      {"ctas", capacity * heads},
                                      {"input_sets", in.size()}});
          }
        }
      }
      CUDA_CHECK(cudaStreamDestroy(stream));
      bench::write_json(json_path, out);
      return 0;
    }

    std::printf("| variant | B | L | H | median us | min us | max us | TFLOP/s | %% peak | floor us | plan us | rel err |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (long long B : bench::parse_list(batches)) {
      for (long long L : bench::parse_list(seqlens)) {
        const int64_t rows = B * L, width = static_cast<int64_t>(heads) * kHeadDim;
        const size_t tensor_bytes = static_cast<size_t>(rows * width) * 2;
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        const size_t set_bytes = 4 * tensor_bytes;
        int n_sets = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / set_bytes + 1, 1, 16));
        while (n_sets > 1 && n_sets * set_bytes > free_b * 6 / 10) --n_sets;
        if (set_bytes > free_b * 8 / 10) {
          std::printf("| (skipped B=%lld L=%lld: %.1f GiB needed) |\n", B, L, set_bytes / 1073741824.0);
          continue;
        }
        const InputSets in(n_sets, rows, rows, heads, stream);
        std::vector<int32_t> table;
        for (long long b = 0; b < B; ++b)
          table.insert(table.end(), {static_cast<int32_t>(b * L), static_cast<int32_t>((b + 1) * L),
                                     static_cast<int32_t>(b * L), static_cast<int32_t>((b + 1) * L)});
        DeviceBuffer table_d(table.size() * 4), flags_d(sizeof(int)), count_d(sizeof(int32_t));
        CUDA_CHECK(cudaMemcpyAsync(table_d.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemsetAsync(flags_d.p, 0, sizeof(int), stream));
        auto args_for = [&](int s) { return in.args(s); };
        const bool do_check = check && B == 1;
        std::vector<float> ref;
        if (do_check) {
          attention_reference(args_for(0), table_d.as<int32_t>(), B, flags_d.as<int>(), stream);
          CUDA_CHECK(cudaStreamSynchronize(stream));
          ref = to_float(*in.o[0], static_cast<size_t>(rows * width));
        }
        const double flops = 4.0 * static_cast<double>(B) * heads * static_cast<double>(L) * L * kHeadDim;
        const double floor_us =
            std::max(flops / (peak_tflops * 1e12), 4.0 * tensor_bytes / (peak_gbps * 1e9)) * 1e6;
        for (const std::string& vname : bench::split(variants)) {
          // "cudnn": the CUDA backend's prefill route (kernels/cuda/attention_cudnn.h) over the same
          // packed batch, its graph built for the backend's power-of-two bucket; plan = the upload of
          // the batch arrays. Otherwise one of our flash variants.
          const bool is_cudnn = vname == "cudnn";
          const FlashVariant var = is_cudnn ? FlashVariant::kM64N64 : parse_variant(vname);
          const int block_m = flash_block_m(var);
          const int64_t capacity = is_cudnn ? 0 : attention_work_capacity(rows, B, block_m);
          DeviceBuffer work(static_cast<size_t>(std::max<int64_t>(capacity, 1)) * sizeof(AttentionWorkItem));
          std::unique_ptr<CudnnSdpa> sdpa;
          CudnnSdpaShape shape;
          std::vector<int32_t> arrays;
          int64_t stride = 0;
          std::unique_ptr<DeviceBuffer> arrays_d, workspace_d;
          if (is_cudnn) {
            std::string why;
            sdpa = CudnnSdpa::create(0, &why);
            if (!sdpa) throw std::runtime_error("cudnn variant: " + why);
            const auto bucket = static_cast<int32_t>(std::bit_ceil(static_cast<uint64_t>(L)));
            shape = CudnnSdpaShape{static_cast<int32_t>(std::bit_ceil(static_cast<uint64_t>(B))),
                                   bucket,
                                   bucket,
                                   heads,
                                   kHeadDim,
                                   in.args(0).scale};
            workspace_d = std::make_unique<DeviceBuffer>(std::max<size_t>(sdpa->prepare(shape), 1));
            // The backend's layout: four arrays of `stride` I32 each (16-byte aligned): seq_q, seq_kv,
            // q offsets, kv offsets.
            const int64_t nb = shape.batch, hd = static_cast<int64_t>(heads) * kHeadDim;
            stride = (nb + 1 + 3) / 4 * 4;
            arrays.assign(static_cast<size_t>(4 * stride), 0);
            for (int64_t b = 0; b <= nb; ++b) {
              const int64_t real = std::min<int64_t>(b, B);
              if (b < nb)
                arrays[static_cast<size_t>(b)] = arrays[static_cast<size_t>(stride + b)] =
                    static_cast<int32_t>(b < B ? L : 0);
              arrays[static_cast<size_t>(2 * stride + b)] = arrays[static_cast<size_t>(3 * stride + b)] =
                  static_cast<int32_t>(real * L * hd);
            }
            arrays_d = std::make_unique<DeviceBuffer>(arrays.size() * 4);
          }
          auto launch = [&](int s) {
            if (!is_cudnn) {
              attention_flash(args_for(s), var, work.as<AttentionWorkItem>(), count_d.as<int32_t>(), capacity, stream);
              return;
            }
            const AttentionArgs a = args_for(s);
            const int32_t* arr = arrays_d->as<int32_t>();
            sdpa->run(shape,
                      CudnnSdpaOperands{a.q, a.k, a.v, a.out, arr, arr + stride, arr + 2 * stride, arr + 3 * stride},
                      workspace_d->p, stream);
          };
          auto plan = [&](int) {
            if (is_cudnn)
              CUDA_CHECK(
                  cudaMemcpyAsync(arrays_d->p, arrays.data(), arrays.size() * 4, cudaMemcpyHostToDevice, stream));
            else
              attention_plan(table_d.as<int32_t>(), B, rows, rows, block_m, work.as<AttentionWorkItem>(),
                             count_d.as<int32_t>(), capacity, flags_d.as<int>(), stream);
          };
          const bench::Timing tp = bench::time_launches(plan, stream, 2, 5, 0.2);
          const bench::Timing t = bench::time_launches([&](int i) { launch(i % n_sets); }, stream, warmup, iters);
          check_flags(flags_d);
          double rel_err = -1.0;
          if (do_check) {
            launch(0);
            CUDA_CHECK(cudaStreamSynchronize(stream));
            rel_err = max_rel_err(to_float(*in.o[0], ref.size()), ref);
          }
          const double tflops = flops / (t.median_us * 1e-6) / 1e12;
          std::printf("| %s | %lld | %lld | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n",
                      vname.c_str(), B, L, heads, t.median_us, t.min_us, t.max_us, tflops,
                      100.0 * tflops / peak_tflops, floor_us, tp.median_us,
                      rel_err >= 0 ? std::to_string(rel_err).c_str() : "-");
          std::fflush(stdout);
          nlohmann::json r;
          r["variant"] = vname;
          r["batch"] = B;
          r["seqlen"] = L;
          r["heads"] = heads;
          r["head_dim"] = kHeadDim;
          r["median_us"] = t.median_us;
          r["min_us"] = t.min_us;
          r["max_us"] = t.max_us;
          r["launches_per_measurement"] = t.inner;
          r["measurements"] = t.iters;
          r["input_sets"] = n_sets;
          r["tflops"] = tflops;
          r["pct_peak"] = 100.0 * tflops / peak_tflops;
          r["floor_us"] = floor_us;
          r["plan_us"] = tp.median_us;
          r["ctas"] = capacity * heads;
          if (rel_err >= 0) r["rel_err_vs_reference"] = rel_err;
          out["results"].push_back(r);
        }
      }
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
    bench::write_json(json_path, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
