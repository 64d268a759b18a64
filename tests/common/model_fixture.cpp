#include "common/model_fixture.h"

#include <cstring>
#include <fstream>

#include "core/check.h"
#include "io/safetensors.h"
#include "model/llada_config.h"

namespace flashdllm::test {

LladaModel load_model(Backend& backend, const std::filesystem::path& dir) {
  LladaModel m;
  m.config = load_llada_config(dir / "config.json");
  Checkpoint ckpt = Checkpoint::open(dir);
  m.weights = load_llada_weights(backend, ckpt, m.config);
  m.rope = make_rope_tables(backend, m.config, m.config.max_sequence_length + 256);
  return m;
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

nlohmann::json load_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  FDLLM_CHECK(in.good(), ErrorCode::kIo, "cannot open {}", path.string());
  return nlohmann::json::parse(in);
}

std::vector<float> full_logits(Backend& backend, const LladaModel& model,
                               const std::vector<std::vector<int32_t>>& sequences) {
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
  KvStore kv = make_kv_store(backend, model.config, off, true);
  ForwardWorkspace ws = make_forward_workspace(backend, model.config, off, off, static_cast<int64_t>(fb.tiles.size()));
  Tensor logits = llada_forward(backend, model, fb, kv, ws);
  std::vector<float> out(static_cast<size_t>(logits.numel()));
  backend.copy_to_host(out.data(), logits);
  return out;
}

}  // namespace flashdllm::test
