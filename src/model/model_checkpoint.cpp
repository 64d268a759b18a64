// Name and shape checks of a LLaDA checkpoint against its config (reference §A.2).
#include "model/model_checkpoint.h"

#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/file.h"
#include "io/tokenizer.h"

namespace flashdllm {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

int64_t model_expected_tensor_count(const ModelConfig& cfg) noexcept { return 9 * cfg.n_layers + 3; }

ExpectedTensor model_expected_tensor(const ModelConfig& cfg, int64_t i) {
  const int64_t d = cfg.d_model, f = cfg.mlp_hidden_size, v = cfg.embedding_size;
  const int64_t count = model_expected_tensor_count(cfg);
  FDLLM_CHECK_ARG(i >= 0 && i < count, "expected tensor index {} outside [0, {})", i, count);
  if (i == 0) return {"model.transformer.wte.weight", {v, d}};
  if (i == count - 2) return {"model.transformer.ln_f.weight", {d}};
  if (i == count - 1) return {"model.transformer.ff_out.weight", {v, d}};
  const int64_t layer = (i - 1) / 9;
  const std::string p = "model.transformer.blocks." + std::to_string(layer) + ".";
  switch ((i - 1) % 9) {
    case 0: return {p + "attn_norm.weight", {d}};
    case 1: return {p + "q_proj.weight", {cfg.n_heads * cfg.head_dim, d}};
    case 2: return {p + "k_proj.weight", {cfg.n_kv_heads * cfg.head_dim, d}};
    case 3: return {p + "v_proj.weight", {cfg.n_kv_heads * cfg.head_dim, d}};
    case 4: return {p + "attn_out.weight", {d, cfg.n_heads * cfg.head_dim}};
    case 5: return {p + "ff_norm.weight", {d}};
    case 6: return {p + "ff_proj.weight", {f, d}};
    case 7: return {p + "up_proj.weight", {f, d}};
    default: return {p + "ff_out.weight", {d, f}};
  }
}

std::vector<ExpectedTensor> model_expected_tensors(const ModelConfig& cfg) {
  std::vector<ExpectedTensor> out;
  const int64_t count = model_expected_tensor_count(cfg);
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(model_expected_tensor(cfg, i));
  return out;
}

void validate_model_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg) {
  // Where a missing tensor should have been: the index of a sharded checkpoint, else the file.
  const std::string where =
      (ckpt.dir() / (ckpt.sharded() ? "model.safetensors.index.json" : "model.safetensors")).string();
  // Expected tensors are made one at a time and the walk stops at the first missing one, so a config
  // claiming 2^20 layers costs what the checkpoint holds, not 9 million names.
  std::set<std::string> names;
  for (int64_t i = 0; i < model_expected_tensor_count(cfg); ++i) {
    const ExpectedTensor e = model_expected_tensor(cfg, i);
    const TensorInfo* t = ckpt.find(e.name);
    FDLLM_CHECK_CKPT(t != nullptr, "{}: missing tensor '{}' (expected shape {} from the config)", where, e.name,
                     shape_str(e.shape));
    FDLLM_CHECK_CKPT(t->shape == e.shape, "{}: tensor '{}' has shape {}, but the config implies {}", t->file, e.name,
                     shape_str(t->shape), shape_str(e.shape));
    FDLLM_CHECK_CKPT(t->dtype == DType::kF32 || t->dtype == DType::kF16 || t->dtype == DType::kBF16,
                     "{}: tensor '{}' has dtype {} (supported weight dtypes: F32, F16, BF16)", t->file, e.name,
                     dtype_name(t->dtype));
    names.insert(e.name);
  }
  for (const std::string& n : ckpt.names()) {
    if (names.count(n) != 0) continue;
    const TensorInfo* t = ckpt.find(n);
    FDLLM_FAIL(ErrorCode::kInvalidCheckpoint,
               "{}: unexpected tensor '{}' (not part of a LLaDA checkpoint with this config: biases, tied or extra "
               "weights are not supported)",
               t->file, n);
  }
}

void validate_llada_tokenizer(const Tokenizer& tok, const ModelConfig& cfg,
                              const std::filesystem::path& tokenizer_file) {
  const std::string src = tokenizer_file.string();
  constexpr const char* kShiftNote =
      " (a tokenizer.json that lacks an added token shifts the ids of every later one; use the tokenizer "
      "files of this checkpoint)";
  const auto mask = tok.token_to_id("<|mdm_mask|>");
  FDLLM_CHECK_CKPT(mask.has_value(),
                   "{}: the mask token '<|mdm_mask|>' is missing, but config.json has mask_token_id = {}{}", src,
                   cfg.mask_token_id, kShiftNote);
  FDLLM_CHECK_CKPT(*mask == cfg.mask_token_id,
                   "{}: the mask token '<|mdm_mask|>' has id {}, but config.json has mask_token_id = {}{}", src, *mask,
                   cfg.mask_token_id, kShiftNote);
  const std::pair<const char*, int32_t> special_ids[] = {{"eos_token_id", cfg.eos_token_id},
                                                         {"pad_token_id", cfg.pad_token_id}};
  for (const auto& [field, id] : special_ids) {
    const std::string token = tok.id_to_token(id);
    FDLLM_CHECK_CKPT(!token.empty(), "{}: config.json has {} = {}, but the tokenizer has no token with that id{}", src,
                     field, id, kShiftNote);
    FDLLM_CHECK_CKPT(tok.is_special(id),
                     "{}: config.json has {} = {}, but that id is '{}', not a special token of the tokenizer{}", src,
                     field, id, token, kShiftNote);
  }
  if (const auto eos = tok.token_to_id("<|endoftext|>"))
    FDLLM_CHECK_CKPT(*eos == cfg.eos_token_id,
                     "{}: the token '<|endoftext|>' has id {}, but config.json has eos_token_id = {}{}", src, *eos,
                     cfg.eos_token_id, kShiftNote);
  if (const auto eot = tok.token_to_id("<|eot_id|>"))
    FDLLM_CHECK_CKPT(tok.is_special(*eot), "{}: the end-of-turn token '<|eot_id|>' (id {}) is not a special token", src,
                     *eot);
  FDLLM_CHECK_CKPT(tok.vocab_size() <= cfg.embedding_size,
                   "{}: token '{}' has id {}, outside the embedding table (config.json embedding_size = {})", src,
                   tok.id_to_token(tok.vocab_size() - 1), tok.vocab_size() - 1, cfg.embedding_size);
}

int validate_model_index(const std::filesystem::path& index_json, const ModelConfig& cfg) {
  const std::string src = index_json.string();
  const nlohmann::json j = read_json_file(index_json, /*reject_duplicate_keys=*/true);
  FDLLM_CHECK_CKPT(j.is_object(), "{}: index must be a JSON object", src);
  auto wm = j.find("weight_map");
  FDLLM_CHECK_CKPT(wm != j.end() && wm->is_object(), "{}: missing or non-object 'weight_map'", src);

  std::set<std::string> names;  // filled only with names the index holds (see validate_model_checkpoint)
  int64_t params = 0;
  for (int64_t i = 0; i < model_expected_tensor_count(cfg); ++i) {
    const ExpectedTensor e = model_expected_tensor(cfg, i);
    auto it = wm->find(e.name);
    FDLLM_CHECK_CKPT(it != wm->end(), "{}: missing tensor '{}' in weight_map", src, e.name);
    FDLLM_CHECK_CKPT(it->is_string() && !it->get_ref<const std::string&>().empty(),
                     "{}: weight_map entry of tensor '{}' must be a shard file name", src, e.name);
    names.insert(e.name);
    int64_t n = 1;
    for (int64_t s : e.shape) n *= s;
    params += n;
  }
  for (const auto& [name, shard] : wm->items())
    FDLLM_CHECK_CKPT(names.count(name) != 0, "{}: unexpected tensor '{}' in weight_map (not part of a LLaDA checkpoint "
                     "with this config)", src, name);

  auto meta = j.find("metadata");
  FDLLM_CHECK_CKPT(meta != j.end() && meta->is_object(), "{}: missing 'metadata' object (with total_size)", src);
  auto ts = meta->find("total_size");
  FDLLM_CHECK_CKPT(ts != meta->end() && ts->is_number_unsigned(),
                   "{}: metadata.total_size missing or not a non-negative integer", src);
  const uint64_t total = ts->get<uint64_t>();
  const auto p = static_cast<uint64_t>(params);
  if (total == 2 * p) return 2;
  if (total == 4 * p) return 4;
  FDLLM_FAIL(ErrorCode::kInvalidCheckpoint,
             "{}: metadata.total_size = {} matches neither 2 bytes ({}) nor 4 bytes ({}) per parameter for the {} "
             "parameters the config implies",
             src, total, 2 * p, 4 * p, params);
}

}  // namespace flashdllm
