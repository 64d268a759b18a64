// Fuzz target: arbitrary bytes through a real tokenizer (the small model's tokenizer.json, the
// LLaDA layout). encode never throws and yields ids the tokenizer knows; decode of those ids never
// throws, and for printable ASCII text gives the text back (byte-level BPE is lossless, NFC is the
// identity on ASCII). The same bytes read as little-endian int32 ids must decode or throw
// Error(kInvalidArgument), never anything else.
#include <cstring>
#include <string>
#include <vector>

#include "flashdllm/status.h"
#include "fuzz/fuzz_common.h"
#include "io/tokenizer.h"

using namespace flashdllm;

namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::from_file(FDLLM_SOURCE_DIR "/models/llada-arith-12m/tokenizer.json");
  return tok;
}

bool printable_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(text, special);
    for (int32_t id : ids) fuzz::require(id >= 0 && id < tok.vocab_size() && !tok.id_to_token(id).empty());
    const std::string back = tok.decode(ids, false);
    if (!special && printable_ascii(text)) fuzz::require(back == text);
    (void)tok.decode(ids, true);
  }
  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  try {
    (void)tok.decode(raw, (size & 1) != 0);
  } catch (const Error& e) {
    fuzz::require(e.code() == ErrorCode::kInvalidArgument);
  }
  return 0;
}
