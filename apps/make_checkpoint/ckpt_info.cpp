// flashdllm-ckpt-info: shows a checkpoint directory as flashdllm's reader sees it.
//
//   flashdllm-ckpt-info DIR [--config CONFIG.json] [--json] [--dump OUTDIR]
//
// Opens DIR with Checkpoint::open (all safetensors / index checks), optionally validates it
// against a LLaDA config (validate_model_checkpoint), and prints one line per tensor (or, with
// --json, one JSON document: {"dir", "sharded", "total_bytes", "validated",
// "tensors": [{"name", "dtype", "shape", "nbytes", "file"}]}, "file" being the file name only).
// --dump writes each tensor's raw bytes to OUTDIR/<name>.bin, exactly as mapped. The Python
// interop test (tests/python/test_safetensors_interop.py) uses --json and --dump to compare our
// reader with files written by the Hugging Face `safetensors` package.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/safetensors.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"

namespace fs = std::filesystem;
using namespace flashdllm;

int main(int argc, char** argv) {
  std::string dir, config, dump;
  bool as_json = false;
  CLI::App app{"List (and optionally validate or dump) a safetensors checkpoint as flashdllm reads it"};
  app.add_option("dir", dir, "checkpoint directory (model.safetensors or model.safetensors.index.json + shards)")
      ->required();
  app.add_option("--config", config, "validate against this LLaDA config.json")->check(CLI::ExistingFile);
  app.add_flag("--json", as_json, "print JSON instead of text");
  app.add_option("--dump", dump, "write each tensor's raw bytes to DUMP/<name>.bin");
  CLI11_PARSE(app, argc, argv);
  try {
    const Checkpoint ck = Checkpoint::open(dir);
    bool validated = false;
    if (!config.empty()) {
      validate_model_checkpoint(ck, load_model_config(config));
      validated = true;
    }
    if (!dump.empty()) {
      fs::create_directories(dump);
      for (const std::string& n : ck.names()) {
        const TensorInfo& t = ck.get(n);
        const fs::path p = fs::path(dump) / (n + ".bin");
        std::ofstream f(p, std::ios::binary | std::ios::trunc);
        f.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes));
        f.close();
        FDLLM_CHECK(f.good(), ErrorCode::kIo, "{}: write failed", p.string());
      }
    }
    if (as_json) {
      nlohmann::ordered_json j;
      j["dir"] = dir;
      j["sharded"] = ck.sharded();
      j["total_bytes"] = ck.total_bytes();
      j["validated"] = validated;
      j["tensors"] = nlohmann::ordered_json::array();
      for (const std::string& n : ck.names()) {
        const TensorInfo& t = ck.get(n);
        j["tensors"].push_back({{"name", n},
                                {"dtype", dtype_name(t.dtype)},
                                {"shape", t.shape},
                                {"nbytes", t.nbytes},
                                {"file", fs::path(t.file).filename().string()}});
      }
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      for (const std::string& n : ck.names()) {
        const TensorInfo& t = ck.get(n);
        std::string shape;
        for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
        std::printf("%-56s %-5s [%s] %s\n", n.c_str(), dtype_name(t.dtype), shape.c_str(),
                    fs::path(t.file).filename().string().c_str());
      }
      std::printf("%zu tensors, %zu bytes, %s%s\n", ck.names().size(), ck.total_bytes(),
                  ck.sharded() ? "sharded" : "single file", validated ? ", valid for the config" : "");
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "flashdllm-ckpt-info: error (%s): %s\n", error_code_name(e.code()), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashdllm-ckpt-info: error: %s\n", e.what());
  }
  return 1;
}
