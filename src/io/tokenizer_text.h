// Internal to the tokenizer (src/io/tokenizer*.cpp): UTF-8 stepping and lossy decoding, the
// Unicode character classes used outside the regex engine, and GPT-2's byte <-> unicode alphabet of
// the ByteLevel pre-tokenizer and decoder.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flashdllm::tokenizer_detail {

/// One step of UTF-8 decoding at a byte position. For an invalid sequence, `len` is the length of
/// its maximal invalid subpart (Unicode §3.9 / WHATWG / Rust `from_utf8_lossy`), at least 1.
struct Utf8Step {
  char32_t cp;
  uint32_t len;
  bool valid;
};

Utf8Step utf8_step(std::string_view s, size_t i);
/// Appends code point `cp` as UTF-8.
void utf8_append(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);
/// Rust `String::from_utf8_lossy`: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

/// Unicode White_Space (the 25 code points of Rust's and Oniguruma's \s).
bool is_white_space(char32_t c);
/// Rust `char::is_numeric`: general category Nd, Nl or No.
bool is_numeric(char32_t c);
/// Rust regex \w (Alphabetic, M, Nd, Pc, Join_Control), used by added tokens' `single_word`.
bool is_word_char(char32_t c);

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_utf8;  // UTF-8 of the character standing for each byte
  std::array<int16_t, 0x144> cp_to_byte;      // code point -> byte, -1 if not in the alphabet

  ByteAlphabet() {
    cp_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      utf8_append(byte_to_utf8[b], cp);
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
  int byte_of(char32_t cp) const { return cp < cp_to_byte.size() ? cp_to_byte[cp] : -1; }
};

/// The alphabet (built once).
const ByteAlphabet& byte_alphabet();
/// `s`'s bytes as ByteLevel characters (UTF-8).
std::string byte_level_map(std::string_view s);

}  // namespace flashdllm::tokenizer_detail
