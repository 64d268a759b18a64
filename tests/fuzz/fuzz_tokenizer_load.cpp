// Fuzz target: tokenizer.json. A tokenizer that loads must encode and decode without failing on a
// fixed mixed text (ASCII, multi-byte UTF-8, invalid bytes, an added-token look-alike), and every id
// it produces must decode.
#include <string>

#include "flashdllm/status.h"
#include "fuzz/fuzz_common.h"
#include "io/tokenizer.h"

using namespace flashdllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& path = fuzz::as_file("tokenizer.json", data, size);
  try {
    const Tokenizer tok = Tokenizer::from_file(path);
    const std::string text = "Hi 12+7=19 \xc3\xa9\xe4\xb8\xad \xff\xfe <|endoftext|>\n\t  x";
    for (bool special : {false, true}) {
      const auto ids = tok.encode(text, special);
      for (int32_t id : ids) fuzz::require(id >= 0 && id < tok.vocab_size());
      (void)tok.decode(ids, false);
      (void)tok.decode(ids, true);
    }
  } catch (const Error&) {
  }
  return 0;
}
