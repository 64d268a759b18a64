#include "common/model_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "common/numerics.h"
#include "common/test_paths.h"
#include "core/check.h"
#include "io/safetensors.h"
#include "model/model_config.h"

namespace flashdllm::test {

Model load_model(Backend& backend, const std::filesystem::path& dir, const TensorParallel& tp,
                 const ModelPrecision& precision) {
  Model m;
  m.config = load_model_config(dir / "config.json");
  Checkpoint ckpt = Checkpoint::open(dir);
  m.weights = load_model_weights(backend, ckpt, m.config, tp, precision);
  m.rope = make_rope_tables(backend, m.config, m.config.max_sequence_length + 256);
  m.tp = tp;
  return m;
}

TpGroup load_tp_group(const std::filesystem::path& dir, int world, int threads, bool dummy, uint64_t seed) {
  TpGroup g;
  g.comms = make_local_communicators(world);
  std::vector<Communicator*> comms;
  for (int r = 0; r < world; ++r) {
    g.backends.push_back(make_cpu_backend(threads));
    comms.push_back(g.comms[static_cast<size_t>(r)].get());
  }
  g.models.reserve(static_cast<size_t>(world));  // denoisers keep references: no reallocation
  const ModelConfig cfg = load_model_config(dir / "config.json");
  for (int r = 0; r < world; ++r) {
    const TensorParallel tp{r, world, comms[static_cast<size_t>(r)]};
    Backend& be = *g.backends[static_cast<size_t>(r)];
    if (!dummy) {
      g.models.push_back(load_model(be, dir, tp));
      continue;
    }
    Model m;
    m.config = cfg;
    m.weights = make_dummy_weights(be, cfg, seed, tp);
    m.rope = make_rope_tables(be, cfg, cfg.max_sequence_length + 256);
    m.tp = tp;
    g.models.push_back(std::move(m));
  }
  g.lockstep = std::make_unique<Lockstep>(world, comms);
  return g;
}

std::filesystem::path checkpoint_with_heads(const std::filesystem::path& src, int64_t n_heads) {
  namespace fs = std::filesystem;
  const fs::path dir = temp_dir() / fmt::format("{}-{}heads", src.filename().string(), n_heads);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "config.json") fs::create_symlink(fs::absolute(e.path()), dir / e.path().filename());
  nlohmann::json cfg = load_json(src / "config.json");
  cfg["n_heads"] = n_heads;
  cfg["n_kv_heads"] = n_heads;
  std::ofstream(dir / "config.json") << cfg.dump(2);
  return dir;
}

std::vector<int32_t> i64_tensor_as_i32(const TensorInfo& t) {
  FDLLM_ASSERT_MSG(t.dtype == DType::kI64, "fixture tensor {} is not I64", t.name);
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t v;
    std::memcpy(&v, static_cast<const char*>(t.data) + 8 * i, 8);
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

std::vector<float> f32_tensor(const TensorInfo& t) {
  FDLLM_ASSERT_MSG(t.dtype == DType::kF32, "fixture tensor {} is not F32", t.name);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data, out.size() * 4);
  return out;
}

void expect_within_bf16_yardstick(const std::string& label, const std::string& key, const std::vector<float>& got,
                                  const std::vector<float>& cpu, const std::vector<float>& upstream, int64_t V,
                                  const nlohmann::json& yard) {
  const double err_cpu = rel_max_err(got, cpu), err_up = rel_max_err(got, upstream);
  const double yard_err = yard["rel_max_err"][key].get<double>();
  // Rows whose upstream top-2 gap the yardstick's own error could close (2 x its max error) are near
  // ties: bf16 rounding flips them either way (llada_moe_a's L33 has gaps of 0.004 x max|logit|
  // against a 0.03 error), so the agreement floor counts only the rows beyond that gap.
  const double agree = argmax_agreement(got, upstream, V, 2.0 * yard_err * max_abs(upstream));
  std::printf("%s %s: CUDA vs CPU %.3e, vs upstream %.3e, argmax agreement beyond near ties %.4f\n", label.c_str(),
              key.c_str(), err_cpu, err_up, agree);
  const double bound = kBf16YardstickFactor * yard_err;
  EXPECT_LE(err_cpu, bound) << label << " " << key;
  EXPECT_LE(err_up, bound) << label << " " << key;
  EXPECT_GE(agree, yard["argmax_agreement"][key].get<double>() - kBf16YardstickArgmaxSlack) << label << " " << key;
}

nlohmann::json load_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  FDLLM_CHECK(in.good(), ErrorCode::kIo, "cannot open {}", path.string());
  return nlohmann::json::parse(in);
}

ForwardBatch full_recompute_batch(const std::vector<std::vector<int32_t>>& sequences) {
  ForwardBatch fb;
  int32_t off = 0;
  for (const auto& seq : sequences) {
    const int32_t L = static_cast<int32_t>(seq.size());
    for (int32_t p = 0; p < L; ++p) {
      fb.token_ids.push_back(seq[p]);
      fb.positions.push_back(p);
      fb.kv_rows.push_back(off + p);
      fb.logit_rows.push_back(off + p);
      fb.row_keys.push_back(p);
    }
    fb.tiles.push_back({off, off + L, off, off + L});
    off += L;
  }
  return fb;
}

std::vector<float> forward_logits(Backend& backend, const Model& model, const ForwardBatch& fb,
                                  std::vector<float>* last_k) {
  const int64_t T = fb.n_tokens();
  KvStore kv = make_kv_store(backend, model.config, T, true, model.tp);
  ForwardWorkspace ws = make_forward_workspace(backend, model.config, T, std::max<int64_t>(T, 1),
                                               static_cast<int64_t>(fb.tiles.size()), 0, model.tp);
  Tensor logits = model_forward(backend, model, fb, kv, ws);
  std::vector<float> out(static_cast<size_t>(logits.numel()));
  if (!out.empty()) backend.copy_to_host(out.data(), logits);
  if (last_k != nullptr) {
    last_k->resize(static_cast<size_t>(kv.k.back().numel()));
    backend.copy_to_host(last_k->data(), kv.k.back());
  }
  return out;
}

std::vector<float> full_logits(Backend& backend, const Model& model,
                               const std::vector<std::vector<int32_t>>& sequences) {
  return forward_logits(backend, model, full_recompute_batch(sequences));
}

std::vector<GenerateRequest> random_id_requests(const ModelConfig& c, size_t n, uint32_t seed, int64_t first_length,
                                                int64_t step) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(5, std::min(c.mask_token_id, c.eos_token_id) - 1);
  std::vector<GenerateRequest> rq(n);
  for (size_t i = 0; i < n; ++i) {
    rq[i].prompt_ids.resize(static_cast<size_t>(first_length + step * static_cast<int64_t>(i)));
    for (auto& t : rq[i].prompt_ids) t = id(rng);
  }
  return rq;
}

CpuCheckpoint& cpu_checkpoint(const std::filesystem::path& dir, int threads) {
  static std::map<std::filesystem::path, std::unique_ptr<CpuCheckpoint>> loaded;
  std::unique_ptr<CpuCheckpoint>& c = loaded[dir];
  if (!c) {
    auto backend = make_cpu_backend(threads);
    Model model = load_model(*backend, dir);
    c = std::make_unique<CpuCheckpoint>(CpuCheckpoint{std::move(backend), std::move(model)});
  }
  return *c;
}

std::function<void(nlohmann::json&)> set_key(const char* key, nlohmann::json v) {
  return [key, v](nlohmann::json& j) { j[key] = v; };
}
std::function<void(nlohmann::json&)> erase_key(const char* key) {
  return [key](nlohmann::json& j) { j.erase(key); };
}

void expect_config_refused(const nlohmann::json& config, const BadConfig& b, const std::string& source) {
  nlohmann::json j = config;
  b.mutate(j);
  try {
    parse_model_config(j, source);
    ADD_FAILURE() << b.name << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidCheckpoint) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find(source), std::string::npos) << msg;
    for (const std::string& p : b.parts) EXPECT_NE(msg.find(p), std::string::npos) << "lacks '" << p << "': " << msg;
  }
}

double verify_vs_full_forward(Backend& be, const Model& m, const std::vector<int32_t>& x, int32_t a, int32_t b) {
  const auto T = static_cast<int64_t>(x.size());
  KvStore kv = make_kv_store(be, m.config, T, /*shared_across_layers=*/false);
  ForwardWorkspace ws = make_forward_workspace(be, m.config, T, T, 1);
  Tensor lg = model_forward(be, m, full_recompute_batch({x}), kv, ws);
  const int64_t V = m.config.embedding_size;
  std::vector<float> full(static_cast<size_t>(lg.numel()));
  be.copy_to_host(full.data(), lg);
  VerifyBatch vb;
  for (int32_t p = a; p < b; ++p) {
    vb.token_ids.push_back(x[static_cast<size_t>(p)]);
    vb.positions.push_back(p);
    vb.logit_rows.push_back(p - a);
    vb.row_keys.push_back(0);
  }
  for (int32_t p = 0; p < T; ++p)
    if (p < a || p >= b) vb.key_rows.push_back(p);
  vb.tiles.push_back({0, b - a, 0, static_cast<int32_t>(vb.key_rows.size()), 0, 0});
  ForwardWorkspace vws =
      make_forward_workspace(be, m.config, b - a, b - a, 1, static_cast<int64_t>(vb.key_rows.size()));
  Tensor vl = model_verify_forward(be, m, vb, kv, vws);
  std::vector<float> got(static_cast<size_t>(vl.numel()));
  be.copy_to_host(got.data(), vl);
  const std::vector<float> want(full.begin() + a * V, full.begin() + b * V);
  return rel_max_err(got, want);
}

}  // namespace flashdllm::test
