#include "common/golden_fixture.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>

#include "common/model_fixture.h"
#include "common/test_paths.h"
#include "core/check.h"

namespace flashdllm::test {

const nlohmann::json& golden_json(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, nlohmann::json> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(file);
  if (it == cache.end()) it = cache.emplace(file, load_json(golden_dir() / file)).first;
  return it->second;
}

GoldenFixture& golden_fixture(int cpu_threads) {
  static GoldenFixture f = [&] {
    auto backend = make_cpu_backend(cpu_threads);
    Model model = load_model(*backend, golden_dir());
    return GoldenFixture{golden_dir(),
                         std::move(backend),
                         std::move(model),
                         golden_json("gen_llada.json"),
                         golden_json("gen_fastdllm.json"),
                         golden_json("gen_flashdllm.json")};
  }();
  return f;
}

const SafetensorsFile& golden_forward() {
  static const std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(golden_dir() / "forward.safetensors");
  return *f;
}

std::vector<std::string> golden_forward_keys() {
  std::vector<std::string> keys;
  const auto& t = golden_forward().tensors();
  for (const auto& [name, info] : t) {
    const std::string prefix = "input_ids.";
    if (name.rfind(prefix, 0) == 0 && t.count("logits." + name.substr(prefix.size())) != 0)
      keys.push_back(name.substr(prefix.size()));
  }
  return keys;
}

std::vector<int32_t> golden_prompt(const nlohmann::json& file, const nlohmann::json& run) {
  return file["prompts"][run["prompt_set"].get<std::string>()][run["prompt_index"].get<size_t>()]
      .get<std::vector<int32_t>>();
}

std::vector<std::vector<int32_t>> golden_prompt_set(const nlohmann::json& file, const nlohmann::json& run) {
  return file["prompts"][run["prompt_set"].get<std::string>()].get<std::vector<std::vector<int32_t>>>();
}

std::vector<size_t> golden_runs(const nlohmann::json& file, const std::function<bool(const nlohmann::json&)>& keep) {
  std::vector<size_t> out;
  for (size_t i = 0; i < file["runs"].size(); ++i)
    if (keep(file["runs"][i])) out.push_back(i);
  return out;
}

std::vector<std::vector<int32_t>> by_length(std::vector<std::vector<int32_t>> prompts) {
  std::stable_sort(prompts.begin(), prompts.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
  return prompts;
}

double golden_margin(const nlohmann::json& m) {
  if (m.is_string() || m.is_null()) return std::numeric_limits<double>::infinity();
  return m.get<double>();
}

GenerateOptions flash_options() {
  GenerateOptions o;
  o.sampling.gen_length = 512;
  o.decode.block_length = 16;
  return o;
}

GenerateOptions flash_run_options(const nlohmann::json& run, int64_t slots, bool quirks) {
  GenerateOptions o = flash_options();
  o.sampling.gen_length = run["gen_length"];
  o.decode.block_length = run["block_length"];
  o.sampling.threshold = run["threshold"];
  o.decode.track_num = run["track_num"];
  o.decode.mask_num = run["mask_num"];
  o.decode.n_slots = slots;
  o.decode.reference_quirks = quirks;
  return o;
}

}  // namespace flashdllm::test
