// Batch invariance of the request-level engine, measured: every prompt of a workload runs alone
// (Engine::generate, a pool of one slot), then all of them together on a started engine (a pool of
// --slots) arriving a few at a time among filler requests of very different lengths and
// parameters. Reports, per decoding mode, how many answers are token-for-token identical and the
// token agreement of the rest. On the CPU backend the answers must all be identical (the
// tests/engine/test_scheduler.cpp test asserts it); on CUDA the GEMM shape changes with the batch
// and bf16 rounding can flip near-tied decisions, so this is a measurement.
//
//   batch_invariance -m models/llada-arith-12m --device cuda --prompts 64 --slots 32 --json out.json
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "env_registry.h"
#include "flashdllm/engine.h"
#include "model/model_config.h"

namespace {

using namespace flashdllm;

struct ModeSpec {
  std::string name;
  DecodeSettings d;
  SamplingParams s;
};

ModeSpec mode_of(const std::string& name, int64_t gen) {
  ModeSpec m{name, {}, {}};
  m.s.gen_length = gen;
  if (name == "flash") return m;
  if (name == "flash+verify") {
    m.d.verify = true;
    return m;
  }
  if (name == "none" || name == "dual" || name == "prefix") {
    m.d.cache = parse_cache_mode(name);
    m.s.threshold = 0.9;
    return m;
  }
  throw Error(ErrorCode::kInvalidArgument, fmt::format("--modes: unknown mode '{}'", name));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"batch invariance of the request-level engine (answers alone vs among others)"};
  std::string model = FDLLM_BENCH_DEFAULT_MODEL, device = "cpu", data = FDLLM_BENCH_DEFAULT_DATA, json_out;
  std::string modes = "flash,flash+verify,none,dual";
  int64_t n_prompts = 64, slots = 32, gen = 64, fillers = 64;
  int threads = 0;
  app.add_option("-m,--model", model, "checkpoint directory")->capture_default_str();
  app.add_option("--device", device, "cpu | cuda")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0 = all)")->capture_default_str();
  app.add_option("--data", data, "arith test split (questions)")->capture_default_str();
  app.add_option("--prompts", n_prompts, "prompts measured")->capture_default_str();
  app.add_option("--fillers", fillers, "filler requests of other lengths and parameters")->capture_default_str();
  app.add_option("--slots", slots, "slots of the started engine")->capture_default_str();
  app.add_option("--gen-length", gen, "max_tokens of the measured prompts")->capture_default_str();
  app.add_option("--modes", modes, "comma-separated: flash, flash+verify, none, dual, prefix")->capture_default_str();
  app.add_option("--json", json_out, "write the results here");
  CLI11_PARSE(app, argc, argv);
  try {
    EngineOptions eo;
    eo.model_dir = model;
    eo.device = device;
    eo.threads = threads;
    eo.backend = cli::env_settings().backend;  // FLASHDLLM_* (flashdllm env)
    auto engine = Engine::load(eo);
    std::vector<std::string> questions;
    {
      std::ifstream in(data);
      if (!in) throw Error(ErrorCode::kIo, fmt::format("cannot read --data '{}'", data));
      for (std::string line; std::getline(in, line) && static_cast<int64_t>(questions.size()) < n_prompts;)
        questions.push_back(nlohmann::json::parse(line)["question"].get<std::string>());
    }
    nlohmann::ordered_json out;
    out["model"] = model;
    out["backend"] = engine->backend_name();
    out["prompts"] = questions.size();
    out["fillers"] = fillers;
    out["slots"] = slots;
    out["gen_length"] = gen;
    std::stringstream ms(modes);
    for (std::string name; std::getline(ms, name, ',');) {
      const ModeSpec m = mode_of(name, gen);
      GenerateOptions go{m.d, m.s};
      std::vector<GenerateResult> alone;
      for (const auto& q : questions) {
        GenerateRequest r;
        r.prompt = q;
        alone.push_back(engine->generate({r}, go)[0]);
      }
      ServeOptions so;
      so.decode = m.d;
      so.decode.n_slots = slots;
      so.max_model_len = 512;
      so.max_queue = n_prompts + fillers + 8;
      engine->start(so);
      std::mt19937 rng(7);
      std::vector<std::shared_ptr<RequestStream>> mine;
      std::vector<std::shared_ptr<RequestStream>> others;
      const int64_t lengths[] = {3, 150, 17, 90, 5, 60, 199, 9};
      size_t qi = 0;
      for (int64_t k = 0; qi < questions.size() || k < fillers; ++k) {
        // Arrivals spread over the run: a measured prompt and a filler, then a short pause.
        if (qi < questions.size()) {
          GenerateRequest r;
          r.prompt = questions[qi++];
          mine.push_back(engine->submit(r, m.s));
        }
        if (k < fillers) {
          GenerateRequest f;
          std::uniform_int_distribution<int32_t> id(5, 2000);
          f.prompt_ids.resize(static_cast<size_t>(lengths[k % 8]));
          for (auto& t : f.prompt_ids) t = id(rng);
          SamplingParams fs = m.s;
          fs.gen_length = k % 3 == 0 ? gen : gen / 2;
          if (k % 5 == 1) fs.temperature = 1.0;
          fs.seed = static_cast<uint64_t>(k);
          others.push_back(engine->submit(f, fs));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      auto wait = [](RequestStream& s) -> std::shared_ptr<const GenerateResult> {
        while (auto ev = s.next(std::chrono::seconds(600)))
          if (ev->finished) {
            if (ev->finish_reason == FinishReason::kError) throw Error(ev->error_code, ev->error);
            return ev->result;
          }
        throw Error(ErrorCode::kInternal, "a request did not finish");
      };
      int64_t identical = 0, tokens = 0, agree = 0;
      for (size_t i = 0; i < mine.size(); ++i) {
        auto r = wait(*mine[i]);
        const auto& a = alone[i].output_ids;
        const auto& b = r->output_ids;
        identical += a == b;
        const size_t n = std::max(a.size(), b.size());
        tokens += static_cast<int64_t>(n);
        for (size_t t = 0; t < std::min(a.size(), b.size()); ++t) agree += a[t] == b[t];
      }
      for (auto& o : others) wait(*o);
      const EngineMetrics em = engine->metrics();
      engine->stop(true);
      nlohmann::ordered_json row;
      row["mode"] = name;
      row["identical_answers"] = identical;
      row["answers"] = mine.size();
      row["identical_rate"] = mine.empty() ? 0.0 : static_cast<double>(identical) / static_cast<double>(mine.size());
      row["token_agreement"] = tokens > 0 ? static_cast<double>(agree) / static_cast<double>(tokens) : 1.0;
      row["iterations"] = em.iterations;
      out["modes"].push_back(row);
      std::cout << fmt::format("{:<14} identical answers {}/{} ({:.1f}%), token agreement {:.4f}\n", name, identical,
                               mine.size(), 100.0 * row["identical_rate"].get<double>(),
                               row["token_agreement"].get<double>());
    }
    if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  } catch (const Error& e) {
    std::cerr << "batch_invariance: " << e.what() << "\n";
    return e.code() == ErrorCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
