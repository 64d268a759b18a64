// Fuzz target: the chat template. The input is read twice: as a tokenizer_config.json
// (ChatTemplate::from_tokenizer_config), and as chat messages for the LLaDA renderer (fields
// separated by 0x00: bos, then role, content, role, content, ...). A rendering must start with the
// BOS (when there are messages), hold one header per message and end with the assistant header.
#include <string>
#include <vector>

#include "flashdllm/status.h"
#include "fuzz/fuzz_common.h"
#include "io/chat_template.h"

using namespace flashdllm;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const ChatTemplate t = ChatTemplate::from_tokenizer_config(fuzz::as_file("tokenizer_config.json", data, size));
    (void)t.render({{"user", "What is 2+2?"}});
  } catch (const Error&) {
  }

  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t i = 0; i <= bytes.size(); ++i)
    if (i == bytes.size() || bytes[i] == '\0') {
      fields.push_back(bytes.substr(start, i - start));
      start = i + 1;
    }
  const ChatTemplate t = ChatTemplate::llada(fields[0]);
  std::vector<ChatMessage> messages;
  for (size_t i = 1; i + 1 < fields.size(); i += 2) messages.push_back({fields[i], fields[i + 1]});
  const std::string out = t.render(messages);
  const std::string assistant = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  fuzz::require(out.size() >= assistant.size() &&
                out.compare(out.size() - assistant.size(), assistant.size(), assistant) == 0);
  if (!messages.empty()) fuzz::require(out.compare(0, fields[0].size(), fields[0]) == 0);
  // Headers a message's own text holds add to the count, never subtract from it.
  fuzz::require(count(out, "<|start_header_id|>") >= messages.size() + 1);
  return 0;
}
