// The weight maps (model_checkpoint.h) and the checks of a checkpoint against its config.
#include "model/model_checkpoint.h"

#include <set>
#include <utility>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fp8.h"
#include "io/file.h"
#include "io/tokenizer.h"

namespace flashdllm {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// The fixed roles of one layer (the expert roles follow them, 3 per expert, for a MoE model).
std::vector<WeightRole> layer_roles(const ModelConfig& cfg) {
  using R = WeightRole;
  std::vector<WeightRole> r = {R::kAttnNorm, R::kQ};
  if (cfg.qkv_bias) r.push_back(R::kQBias);
  r.push_back(R::kK);
  if (cfg.qkv_bias) r.push_back(R::kKBias);
  r.push_back(R::kV);
  if (cfg.qkv_bias) r.push_back(R::kVBias);
  if (cfg.qk_norm) r.insert(r.end(), {R::kQNorm, R::kKNorm});
  r.insert(r.end(), {R::kAttnOut, R::kFfNorm});
  if (cfg.moe.on())
    r.push_back(R::kRouter);
  else
    r.insert(r.end(), {R::kGate, R::kUp, R::kDown});
  return r;
}
constexpr WeightRole kExpertRoles[] = {WeightRole::kExpertGate, WeightRole::kExpertUp, WeightRole::kExpertDown};
int64_t expert_tensors(const ModelConfig& cfg) noexcept { return cfg.moe.on() ? 3 * int64_t{cfg.moe.n_experts} : 0; }

std::vector<int64_t> role_shape(const ModelConfig& cfg, WeightRole role) {
  const int64_t d = cfg.d_model, f = cfg.mlp_hidden_size, v = cfg.embedding_size;
  const int64_t hq = cfg.n_heads * cfg.head_dim, hkv = cfg.kv_width();
  switch (role) {
    case WeightRole::kEmbedding:
    case WeightRole::kLmHead: return {v, d};
    case WeightRole::kQ: return {hq, d};
    case WeightRole::kK:
    case WeightRole::kV: return {hkv, d};
    case WeightRole::kQBias: return {hq};
    case WeightRole::kKBias:
    case WeightRole::kVBias: return {hkv};
    case WeightRole::kAttnOut: return {d, hq};
    case WeightRole::kGate:
    case WeightRole::kUp:
    case WeightRole::kExpertGate:
    case WeightRole::kExpertUp: return {f, d};
    case WeightRole::kDown:
    case WeightRole::kExpertDown: return {d, f};
    case WeightRole::kQNorm:
    case WeightRole::kKNorm: return {cfg.head_dim};
    case WeightRole::kRouter: return {cfg.moe.n_experts, d};
    default: return {d};  // the norms
  }
}

std::string llada_name(WeightRole role, int64_t i) {
  const auto block = [i](const char* n) { return fmt::format("model.transformer.blocks.{}.{}.weight", i, n); };
  switch (role) {
    case WeightRole::kEmbedding: return "model.transformer.wte.weight";
    case WeightRole::kAttnNorm: return block("attn_norm");
    case WeightRole::kQ: return block("q_proj");
    case WeightRole::kK: return block("k_proj");
    case WeightRole::kV: return block("v_proj");
    case WeightRole::kAttnOut: return block("attn_out");
    case WeightRole::kFfNorm: return block("ff_norm");
    case WeightRole::kGate: return block("ff_proj");
    case WeightRole::kUp: return block("up_proj");
    case WeightRole::kDown: return block("ff_out");
    case WeightRole::kFinalNorm: return "model.transformer.ln_f.weight";
    case WeightRole::kLmHead: return "model.transformer.ff_out.weight";
    default: FDLLM_FAIL(ErrorCode::kInternal, "LLaDA has no q/k/v biases");
  }
}

/// The Hugging Face layout of Dream and LLaDA-MoE (model.layers.{i}.…); expert roles take `e`.
std::string hf_name(WeightRole role, int64_t i, int64_t e) {
  const auto layer = [i](const char* n) { return fmt::format("model.layers.{}.{}", i, n); };
  const auto expert = [i, e](const char* n) { return fmt::format("model.layers.{}.mlp.experts.{}.{}", i, e, n); };
  switch (role) {
    case WeightRole::kQNorm: return layer("self_attn.q_norm.weight");
    case WeightRole::kKNorm: return layer("self_attn.k_norm.weight");
    case WeightRole::kRouter: return layer("mlp.gate.weight");
    case WeightRole::kExpertGate: return expert("gate_proj.weight");
    case WeightRole::kExpertUp: return expert("up_proj.weight");
    case WeightRole::kExpertDown: return expert("down_proj.weight");
    case WeightRole::kEmbedding: return "model.embed_tokens.weight";
    case WeightRole::kAttnNorm: return layer("input_layernorm.weight");
    case WeightRole::kQ: return layer("self_attn.q_proj.weight");
    case WeightRole::kQBias: return layer("self_attn.q_proj.bias");
    case WeightRole::kK: return layer("self_attn.k_proj.weight");
    case WeightRole::kKBias: return layer("self_attn.k_proj.bias");
    case WeightRole::kV: return layer("self_attn.v_proj.weight");
    case WeightRole::kVBias: return layer("self_attn.v_proj.bias");
    case WeightRole::kAttnOut: return layer("self_attn.o_proj.weight");
    case WeightRole::kFfNorm: return layer("post_attention_layernorm.weight");
    case WeightRole::kGate: return layer("mlp.gate_proj.weight");
    case WeightRole::kUp: return layer("mlp.up_proj.weight");
    case WeightRole::kDown: return layer("mlp.down_proj.weight");
    case WeightRole::kFinalNorm: return "model.norm.weight";
    default: return "lm_head.weight";
  }
}

}  // namespace

std::string weight_name(const ModelConfig& cfg, WeightRole role, int64_t layer, int64_t expert) {
  if (role == WeightRole::kLmHead && cfg.tied_head) role = WeightRole::kEmbedding;
  return cfg.family == ModelFamily::kLlada ? llada_name(role, layer) : hf_name(role, layer, expert);
}

int64_t model_expected_tensor_count(const ModelConfig& cfg) noexcept {
  const auto per_layer = static_cast<int64_t>(layer_roles(cfg).size()) + expert_tensors(cfg);
  return per_layer * cfg.n_layers + (cfg.tied_head ? 2 : 3);
}

ExpectedTensor model_expected_tensor(const ModelConfig& cfg, int64_t i) {
  const int64_t count = model_expected_tensor_count(cfg);
  FDLLM_CHECK_ARG(i >= 0 && i < count, "expected tensor index {} outside [0, {})", i, count);
  const std::vector<WeightRole> fixed = layer_roles(cfg);
  const auto nf = static_cast<int64_t>(fixed.size()), n = nf + expert_tensors(cfg);
  WeightRole role = WeightRole::kEmbedding;
  int64_t layer = 0, expert = 0;
  if (i == 0) {
    role = WeightRole::kEmbedding;
  } else if (i <= n * cfg.n_layers) {
    layer = (i - 1) / n;
    const int64_t j = (i - 1) % n;
    if (j < nf) {
      role = fixed[static_cast<size_t>(j)];
    } else {
      expert = (j - nf) / 3;
      role = kExpertRoles[(j - nf) % 3];
    }
  } else {
    role = i == n * cfg.n_layers + 1 ? WeightRole::kFinalNorm : WeightRole::kLmHead;
  }
  return {weight_name(cfg, role, layer, expert), role_shape(cfg, role), role};
}

std::vector<ExpectedTensor> model_expected_tensors(const ModelConfig& cfg) {
  std::vector<ExpectedTensor> out;
  const int64_t count = model_expected_tensor_count(cfg);
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(model_expected_tensor(cfg, i));
  return out;
}

std::string fp8_scale_name(const std::string& weight) { return weight + "_scale_inv"; }

bool fp8_linear_role(WeightRole role) noexcept {
  switch (role) {
    case WeightRole::kQ:
    case WeightRole::kK:
    case WeightRole::kV:
    case WeightRole::kAttnOut:
    case WeightRole::kGate:
    case WeightRole::kUp:
    case WeightRole::kDown: return true;
    default: return false;
  }
}

namespace {

bool float_dtype(DType d) noexcept { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

/// The dtype checks of expected tensor `e` (`t` its entry) and, for an F8_E4M3 weight, of its block
/// scales; returns the scales' name when it has them (the caller counts them as expected), else "".
std::string check_weight_dtype(const Checkpoint& ckpt, const ModelConfig& cfg, const ExpectedTensor& e,
                               const TensorInfo& t, const std::string& where) {
  const bool may_fp8 =
      cfg.fp8_checkpoint && (fp8_linear_role(e.role) || (e.role == WeightRole::kLmHead && !cfg.tied_head));
  if (t.dtype != DType::kF8E4M3) {
    FDLLM_CHECK_CKPT(float_dtype(t.dtype), "{}: tensor '{}' has dtype {} (supported weight dtypes: F32, F16, BF16{})",
                     t.file, e.name, dtype_name(t.dtype), cfg.fp8_checkpoint ? ", F8_E4M3 for linear weights" : "");
    FDLLM_CHECK_CKPT(!cfg.fp8_checkpoint || !fp8_linear_role(e.role),
                     "{}: tensor '{}' has dtype {}, but config.json's quantization_config (fp8) makes every linear "
                     "weight F8_E4M3 (a partly quantised checkpoint is not supported)",
                     t.file, e.name, dtype_name(t.dtype));
    return {};
  }
  FDLLM_CHECK_CKPT(cfg.fp8_checkpoint,
                   "{}: tensor '{}' is F8_E4M3, but config.json has no quantization_config with quant_method \"fp8\" "
                   "(its block size and scheme)",
                   t.file, e.name);
  FDLLM_CHECK(!cfg.moe.on(), ErrorCode::kUnsupported,
              "{}: tensor '{}' is F8_E4M3: FP8 checkpoints of mixture-of-experts models are not supported yet", t.file,
              e.name);
  FDLLM_CHECK_CKPT(may_fp8,
                   "{}: tensor '{}' is F8_E4M3, but only linear weights (q/k/v, o, gate/up, down, LM head) may be",
                   t.file, e.name);
  const std::string sname = fp8_scale_name(e.name);
  const std::vector<int64_t> sshape{fp8_blocks(e.shape[0]), fp8_blocks(e.shape[1])};
  const TensorInfo* s = ckpt.find(sname);
  FDLLM_CHECK_CKPT(s != nullptr, "{}: missing tensor '{}' (the {} block scales of F8_E4M3 tensor '{}')", where, sname,
                   shape_str(sshape), e.name);
  FDLLM_CHECK_CKPT(s->shape == sshape,
                   "{}: tensor '{}' has shape {}, but F8_E4M3 tensor '{}' {} in 128 x 128 blocks needs {}", s->file,
                   sname, shape_str(s->shape), e.name, shape_str(e.shape), shape_str(sshape));
  FDLLM_CHECK_CKPT(float_dtype(s->dtype), "{}: tensor '{}' has dtype {} (block scales must be F32, F16 or BF16)",
                   s->file, sname, dtype_name(s->dtype));
  return sname;
}

}  // namespace

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
    if (std::string sname = check_weight_dtype(ckpt, cfg, e, *t, where); !sname.empty()) names.insert(std::move(sname));
    names.insert(e.name);
  }
  for (const std::string& n : ckpt.names()) {
    if (names.count(n) != 0) continue;
    const TensorInfo* t = ckpt.find(n);
    FDLLM_FAIL(ErrorCode::kInvalidCheckpoint,
               "{}: unexpected tensor '{}' (not part of a {} checkpoint with this config: biases, tied or extra "
               "weights it does not describe are not supported)",
               t->file, n, family_name(cfg.family));
  }
}

namespace {

/// validate_tokenizer with the mask token's name `mask_name`, `mask_source` saying where it came from
/// when not the family default (the end-of-turn token: end_of_turn_id).
void check_tokenizer(const Tokenizer& tok, const ModelConfig& cfg, const std::filesystem::path& tokenizer_file,
                     const std::string& mask_name, const std::string& mask_source) {
  const std::string src = tokenizer_file.string();
  constexpr const char* kShiftNote =
      " (a tokenizer.json that lacks an added token shifts the ids of every later one; use the tokenizer "
      "files of this checkpoint)";
  const auto mask = tok.token_to_id(mask_name);
  FDLLM_CHECK_CKPT(mask.has_value(), "{}: the mask token '{}'{} is missing, but config.json has mask_token_id = {}{}",
                   src, mask_name, mask_source, cfg.mask_token_id, kShiftNote);
  FDLLM_CHECK_CKPT(*mask == cfg.mask_token_id,
                   "{}: the mask token '{}'{} has id {}, but config.json has mask_token_id = {}{}", src, mask_name,
                   mask_source, *mask, cfg.mask_token_id, kShiftNote);
  FDLLM_CHECK_CKPT(tok.is_special(*mask), "{}: the mask token '{}'{} (id {}) is not a special token", src, mask_name,
                   mask_source, *mask);
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
  if (const auto eot = end_of_turn_id(tok, cfg))
    FDLLM_CHECK_CKPT(tok.is_special(*eot), "{}: the end-of-turn token '{}' (id {}) is not a special token", src,
                     tok.id_to_token(*eot), *eot);
  FDLLM_CHECK_CKPT(tok.vocab_size() <= cfg.embedding_size,
                   "{}: token '{}' has id {}, outside the embedding table (config.json embedding_size = {})", src,
                   tok.id_to_token(tok.vocab_size() - 1), tok.vocab_size() - 1, cfg.embedding_size);
}

}  // namespace

const char* mask_token_name(const ModelConfig& cfg) noexcept {
  return cfg.family == ModelFamily::kLlada ? "<|mdm_mask|>" : "<|mask|>";  // Dream; LLaDA-MoE's Ling tokenizer
}

std::string mask_token_name(const ModelConfig& cfg, const std::filesystem::path& tokenizer_file) {
  const std::filesystem::path path = tokenizer_file.parent_path() / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return mask_token_name(cfg);
  // An unreadable or malformed file only matters where its chat template is used (find_chat_template
  // names it then; --raw runs without it): the mask token keeps the family default here.
  nlohmann::json j;
  try {
    j = read_json_file(path);
  } catch (const Error&) {
    return mask_token_name(cfg);
  }
  if (!j.is_object()) return mask_token_name(cfg);
  const auto it = j.find("mask_token");
  if (it == j.end() || it->is_null()) return mask_token_name(cfg);
  // transformers writes a special token as its text or as an AddedToken object {"content": ...}.
  const nlohmann::json* text = &*it;
  if (it->is_object()) {
    const auto c = it->find("content");
    text = c == it->end() ? nullptr : &*c;
  }
  FDLLM_CHECK_CKPT(text != nullptr && text->is_string() && !text->get_ref<const std::string&>().empty(),
                   "{}: field mask_token = {} must be the mask token's text (a non-empty string, or an object "
                   "with a non-empty string \"content\")",
                   path.string(), it->dump());
  return text->get<std::string>();
}
std::vector<const char*> end_of_turn_token_names(const ModelConfig& cfg) {
  switch (cfg.family) {
    case ModelFamily::kDream: return {"<|im_end|>"};
    // The Ling chat template's turn end, then LLaDA's (a LLaDA tokenizer, as the small MoE model's).
    case ModelFamily::kLladaMoe: return {"<|role_end|>", "<|eot_id|>"};
    default: return {"<|eot_id|>"};
  }
}

std::optional<int32_t> end_of_turn_id(const Tokenizer& tok, const ModelConfig& cfg) {
  for (const char* name : end_of_turn_token_names(cfg))
    if (const auto id = tok.token_to_id(name)) return id;
  return std::nullopt;
}

void validate_llada_tokenizer(const Tokenizer& tok, const ModelConfig& cfg,
                              const std::filesystem::path& tokenizer_file) {
  ModelConfig llada = cfg;
  llada.family = ModelFamily::kLlada;  // LLaDA's end-of-turn token whatever cfg.family says
  check_tokenizer(tok, llada, tokenizer_file, "<|mdm_mask|>", "");
}

void validate_tokenizer(const Tokenizer& tok, const ModelConfig& cfg, const std::filesystem::path& tokenizer_file) {
  const std::string mask = mask_token_name(cfg, tokenizer_file);
  check_tokenizer(tok, cfg, tokenizer_file, mask,
                  mask == mask_token_name(cfg) ? "" : " (tokenizer_config.json's mask_token)");
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
    FDLLM_CHECK_CKPT(names.count(name) != 0,
                     "{}: unexpected tensor '{}' in weight_map (not part of a {} checkpoint "
                     "with this config)",
                     src, name, family_name(cfg.family));

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
