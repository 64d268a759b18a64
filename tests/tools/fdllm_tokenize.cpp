// fdllm_tokenize: a JSONL driver over flashdllm::Tokenizer and flashdllm::ChatTemplate, used by
// the Python parity tests (which compare it with the HF `tokenizers` package and jinja2).
//
//   fdllm_tokenize [--tokenizer tokenizer.json|DIR] [--chat-config tokenizer_config.json] [--timing]
//   (a DIR is read as Tokenizer::from_model_dir reads a checkpoint directory)
//
// Reads one JSON request per line on stdin and writes one JSON reply per line on stdout:
//   {"op":"encode","text":S,"add_special_tokens":B}      -> {"ids":[...]}
//   {"op":"decode","ids":[...],"skip_special_tokens":B}  -> {"text":S}
//   {"op":"chat","messages":[{"role":R,"content":C},...][,"add_generation_prompt":B]} -> {"text":S}
//                                                                     (needs --chat-config)
//   {"op":"token_to_id","token":S}                       -> {"id":N or null}
//   {"op":"info"}                                         -> {"vocab_size":N}
// A failing request answers {"error":message,"code":name}; the driver keeps going. Loading errors
// (bad tokenizer.json or config) are printed to stderr with exit status 2.
// With --timing, stderr gets one JSON line {"encode_seconds":T,"encode_calls":N} at the end.
#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "flashdllm/status.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace {

using json = nlohmann::json;

json handle(const json& req, const std::optional<flashdllm::Tokenizer>& tok,
            const std::optional<flashdllm::ChatTemplate>& chat, double& encode_seconds, long& encode_calls) {
  const std::string op = req.at("op").get<std::string>();
  if (op == "chat") {
    if (!chat) throw std::runtime_error("chat needs --chat-config");
    std::vector<flashdllm::ChatMessage> messages;
    for (const auto& m : req.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    return {{"text", chat->render(messages, req.value("add_generation_prompt", true))}};
  }
  if (!tok) throw std::runtime_error(op + " needs --tokenizer");
  if (op == "encode") {
    const std::string text = req.at("text").get<std::string>();
    const bool add = req.value("add_special_tokens", false);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode(text, add);
    encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++encode_calls;
    return {{"ids", ids}};
  }
  if (op == "decode") {
    const auto ids = req.at("ids").get<std::vector<int32_t>>();
    return {{"text", tok->decode(ids, req.value("skip_special_tokens", false))}};
  }
  if (op == "token_to_id") {
    const auto id = tok->token_to_id(req.at("token").get<std::string>());
    return {{"id", id ? json(*id) : json(nullptr)}};
  }
  if (op == "info") return {{"vocab_size", tok->vocab_size()}};
  throw std::runtime_error("unknown op " + op);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"JSONL driver over the flashdllm tokenizer and chat template (test tool)"};
  std::string tokenizer_path, config_path;
  bool timing = false;
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json, or a checkpoint directory");
  app.add_option("--chat-config", config_path, "tokenizer_config.json with the chat template");
  app.add_flag("--timing", timing, "print total encode time to stderr at the end");
  CLI11_PARSE(app, argc, argv);

  std::optional<flashdllm::Tokenizer> tok;
  std::optional<flashdllm::ChatTemplate> chat;
  try {
    if (std::filesystem::is_directory(tokenizer_path)) {  // a checkpoint directory (e.g. Qwen2's slow files)
      auto t = flashdllm::Tokenizer::from_model_dir(tokenizer_path);
      if (!t) throw flashdllm::Error(flashdllm::ErrorCode::kIo, tokenizer_path + " holds no tokenizer files");
      tok.emplace(std::move(*t));
    } else if (!tokenizer_path.empty()) {
      tok.emplace(flashdllm::Tokenizer::from_file(tokenizer_path));
    }
    if (!config_path.empty()) chat.emplace(flashdllm::ChatTemplate::from_tokenizer_config(config_path));
  } catch (const flashdllm::Error& e) {
    std::cerr << flashdllm::error_code_name(e.code()) << ": " << e.what() << "\n";
    return 2;
  }

  double encode_seconds = 0;
  long encode_calls = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json reply;
    try {
      reply = handle(json::parse(line), tok, chat, encode_seconds, encode_calls);
    } catch (const flashdllm::Error& e) {
      reply = {{"error", e.what()}, {"code", flashdllm::error_code_name(e.code())}};
    } catch (const std::exception& e) {
      reply = {{"error", e.what()}, {"code", "driver"}};
    }
    std::cout << reply.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  }
  std::cout.flush();
  if (timing) {
    std::cerr << json{{"encode_seconds", encode_seconds}, {"encode_calls", encode_calls}}.dump() << "\n";
  }
  return 0;
}
