// Fuzz target: chat templates. The input is read three times: as a tokenizer_config.json
// (ChatTemplate::from_tokenizer_config, then a render), as Jinja template text (jinja::Template:
// parse and render with a few messages), and as chat messages for LLaDA's template (fields
// separated by 0x00: bos, then role, content, role, content, ...), whose rendering must equal the
// §A.5 form written out here (what the hard-wired renderer before minja produced). Errors are
// flashdllm::Error; anything else escaping, a crash or a stall is a finding.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashdllm/status.h"
#include "fuzz/fuzz_common.h"
#include "io/chat_template.h"
#include "io/jinja.h"

using namespace flashdllm;

namespace {

/// Reference §A.5: BOS before the first message, one header per message, trimmed content, then
/// the assistant header.
std::string llada_reference(const std::string& bos, const std::vector<ChatMessage>& messages) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += bos;
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
    out += jinja::python_strip(messages[i].content);
    out += "<|eot_id|>";
  }
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const ChatTemplate t = ChatTemplate::from_tokenizer_config(fuzz::as_file("tokenizer_config.json", data, size));
    (void)t.render({{"system", "Be brief."}, {"user", "What is 2+2?"}});
  } catch (const Error&) {
  }

  try {
    const jinja::Template t = jinja::Template::parse(bytes, "fuzz input");
    nlohmann::ordered_json vars = {{"bos_token", "<s>"}, {"add_generation_prompt", true}, {"tools", nullptr}};
    vars["messages"] =
        nlohmann::ordered_json::array({{{"role", "system"}, {"content", " a "}}, {{"role", "user"}, {"content", "b"}}});
    (void)t.render(vars);
  } catch (const Error&) {
  }

  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t i = 0; i <= bytes.size(); ++i)
    if (i == bytes.size() || bytes[i] == '\0') {
      fields.push_back(bytes.substr(start, i - start));
      start = i + 1;
    }
  std::vector<ChatMessage> messages;
  for (size_t i = 1; i + 1 < fields.size(); i += 2) messages.push_back({fields[i], fields[i + 1]});
  fuzz::require(ChatTemplate::llada(fields[0]).render(messages) == llada_reference(fields[0], messages));
  return 0;
}
