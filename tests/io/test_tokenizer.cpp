// Unit tests of flashdllm::Tokenizer (src/io/tokenizer.cpp). Parity with the HF `tokenizers`
// package on >= 2000 strings is tested in tests/python/test_tokenizer_parity.py; here: loading
// errors, special tokens, decoding rules, invalid ids, round trips, hand-checked BPE merges,
// speed and thread safety.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/test_paths.h"
#include "flashdllm/status.h"
#include "io/tokenizer.h"

namespace flashdllm {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

std::filesystem::path tok_dir() { return test::test_data_dir() / "tokenizer"; }
std::filesystem::path realids_path() { return tok_dir() / "llada_realids.tokenizer.json"; }
std::filesystem::path compact_path() { return tok_dir() / "llada_compact.tokenizer.json"; }

const Tokenizer& realids() {
  static const Tokenizer t = Tokenizer::from_file(realids_path());
  return t;
}

std::vector<std::string> gsm8k_questions() {
  std::ifstream in(test::repo_data_dir() / "gsm8k_test.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line).at("question").get<std::string>());
  return out;
}

/// A tiny tokenizer.json: byte-level alphabet restricted to a-c plus given merges.
json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                    const std::vector<std::string>& extra_vocab) {
  json vocab = json::object();
  int id = 0;
  for (const char* t : {"a", "b", "c", "Ġ"}) vocab[t] = id++;
  for (const auto& t : extra_vocab) vocab[t] = id++;
  json m = json::array();
  for (const auto& [l, r] : merges) m.push_back({l, r});
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"ignore_merges", false}, {"vocab", vocab},
        {"merges", m}}},
  };
}

std::filesystem::path write(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  const auto p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

/// Expects from_file to throw `code` with a message containing every needle.
void expect_load_error(const std::filesystem::path& path, ErrorCode code, const std::vector<std::string>& needles) {
  try {
    (void)Tokenizer::from_file(path);
    FAIL() << "no error loading " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
  }
}

TEST(Tokenizer, RealIdsLayout) {
  const Tokenizer& t = realids();
  EXPECT_EQ(t.vocab_size(), 126349);
  EXPECT_EQ(t.token_to_id("<|startoftext|>"), 126080);
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 126081);
  EXPECT_EQ(t.token_to_id("[CLS]"), 126082);
  EXPECT_EQ(t.token_to_id("[gMASK]"), 126083);
  EXPECT_EQ(t.token_to_id("<|reserved_token_0|>"), 126084);
  EXPECT_EQ(t.token_to_id("<|mdm_mask|>"), 126336);
  EXPECT_EQ(t.token_to_id("<|start_header_id|>"), 126346);
  EXPECT_EQ(t.token_to_id("<|end_header_id|>"), 126347);
  EXPECT_EQ(t.token_to_id("<|eot_id|>"), 126348);
  EXPECT_EQ(t.token_to_id("<|not_a_token|>"), std::nullopt);
  EXPECT_EQ(t.id_to_token(126336), "<|mdm_mask|>");
  EXPECT_EQ(t.id_to_token(5000), "");  // in the hole between the BPE vocabulary and the specials
  for (int32_t id = 126080; id <= 126348; ++id) EXPECT_TRUE(t.is_special(id)) << id;
  EXPECT_FALSE(t.is_special(0));
  EXPECT_FALSE(t.is_special(126349));
  EXPECT_FALSE(t.is_special(-1));
}

TEST(Tokenizer, CompactLayout) {
  const Tokenizer t = Tokenizer::from_file(compact_path());
  EXPECT_EQ(t.vocab_size(), 4096 + 269);
  EXPECT_EQ(t.token_to_id("<|startoftext|>"), 4096);
  EXPECT_EQ(t.token_to_id("<|mdm_mask|>"), 4096 + 256);
  EXPECT_EQ(t.token_to_id("<|eot_id|>"), 4096 + 268);
}

TEST(Tokenizer, SpecialTokensAreSingleIds) {
  const Tokenizer& t = realids();
  const std::string prompt =
      "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  const Ids ids = t.encode(prompt);
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ(ids.front(), 126080);
  EXPECT_EQ(ids[1], 126346);
  int specials = 0;
  for (int32_t id : ids) specials += t.is_special(id) ? 1 : 0;
  EXPECT_EQ(specials, 6);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 126348), 1);
  EXPECT_EQ(t.encode("<|mdm_mask|><|mdm_mask|>"), (Ids{126336, 126336}));
  // Inside a word, next to digits, repeated: still one id each.
  const Ids mixed = t.encode("abc<|eot_id|>12<|endoftext|>");
  EXPECT_EQ(std::count(mixed.begin(), mixed.end(), 126348), 1);
  EXPECT_EQ(std::count(mixed.begin(), mixed.end(), 126081), 1);
  // A truncated or unknown special token is ordinary text.
  for (const char* s : {"<|eot_id|", "<|reserved_token_999|>", "<|eot_id"}) {
    for (int32_t id : t.encode(s)) EXPECT_FALSE(t.is_special(id)) << s;
  }
}

TEST(Tokenizer, DecodeWithAndWithoutSpecialTokens) {
  const Tokenizer& t = realids();
  const std::string text = "<|startoftext|>Hello world<|eot_id|>\n<|mdm_mask|>";
  const Ids ids = t.encode(text);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(t.decode(ids, /*skip_special_tokens=*/true), "Hello world\n");
  EXPECT_EQ(t.decode(Ids{}), "");
  EXPECT_EQ(t.decode(Ids{126081, 126081}, true), "");
}

TEST(Tokenizer, InvalidIdsAreRejected) {
  const Tokenizer& t = realids();
  for (int32_t bad : {-1, 5000, 126079, 126349, 126463, 1 << 30}) {
    try {
      (void)t.decode(Ids{72, bad});
      FAIL() << "no error for id " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("ids[1] = " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

TEST(Tokenizer, RoundTripsGsm8kAndAwkwardText) {
  const Tokenizer& t = realids();
  std::vector<std::string> texts = gsm8k_questions();
  ASSERT_EQ(texts.size(), 1319u);
  texts.insert(texts.end(), {"", " ", "  \n\n\t", "line1\r\nline2\r\n", std::string(3000, ' '), "😀👨‍👩‍👧‍👦🇫🇷",
                             "e\u0301 vs \u00e9", "中文 日本語 한국어", "don't I'LL 'ſ", "x\u180ey\u200bz\u3000",
                             "1234567890 ٣٤٥ ４５", "def f():\n\treturn 1  \n"});
  for (const auto& s : texts) EXPECT_EQ(t.decode(t.encode(s)), s);
}

TEST(Tokenizer, DigitsAreSplitOneByOne) {
  const Tokenizer& t = realids();
  const Ids ids = t.encode("12345");
  ASSERT_EQ(ids.size(), 5u);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(t.id_to_token(ids[k]), std::string(1, static_cast<char>('1' + k)));
}

TEST(Tokenizer, InvalidUtf8EncodesAndDecodesLossily) {
  const Tokenizer& t = realids();
  const std::string bad = "ok\xff\xfe then \xe2\x82 end \xed\xa0\x80.";
  const Ids ids = t.encode(bad);
  EXPECT_FALSE(ids.empty());
  // Rust from_utf8_lossy: one U+FFFD per maximal invalid subpart.
  EXPECT_EQ(t.decode(ids), "ok\uFFFD\uFFFD then \uFFFD end \uFFFD\uFFFD\uFFFD.");
}

TEST(Tokenizer, DecodeReplacesPartialCharacters) {
  const Tokenizer& t = realids();
  // A lone byte of invalid UTF-8 encodes to its byte-level token.
  auto byte_token = [&](unsigned char b) {
    const Ids ids = t.encode(std::string(1, static_cast<char>(b)));
    EXPECT_EQ(ids.size(), 1u) << int(b);
    return ids.empty() ? 0 : ids[0];
  };
  const Ids euro = t.encode("\u20ac");  // E2 82 AC
  const Ids smile = t.encode("\U0001F600");
  // F0 9F 98 is 3 of the 4 bytes of U+1F600: one U+FFFD, then 'a'.
  EXPECT_EQ(t.decode(Ids{byte_token(0xF0), byte_token(0x9F), byte_token(0x98), *t.token_to_id("a")}), "\uFFFDa");
  EXPECT_EQ(t.decode(Ids{byte_token(0xE2), byte_token(0xE2)}), "\uFFFD\uFFFD");
  EXPECT_EQ(t.decode(Ids{byte_token(0xC0), byte_token(0xAF)}), "\uFFFD\uFFFD");
  EXPECT_EQ(t.decode(euro), "\u20ac");
  EXPECT_EQ(t.decode(smile), "\U0001F600");
}

// TextStream: after every append its text is decode() of all ids so far, whatever the split points:
// random ids over single bytes (partial and invalid UTF-8 across appends), ASCII, multi-byte tokens
// and special tokens, appended in random runs (zero-length ones included).
TEST(Tokenizer, TextStreamEqualsDecodeOfEveryPrefix) {
  const Tokenizer& t = realids();
  Ids pool;
  for (int b = 0; b < 256; ++b) {
    const Ids ids = t.encode(std::string(1, static_cast<char>(b)));
    if (ids.size() == 1) pool.push_back(ids[0]);
  }
  for (const char* s : {"\u20ac", "\U0001F600", "中文", " the", "\n\n", "é"})
    for (int32_t id : t.encode(s)) pool.push_back(id);
  for (const char* s : {"<|eot_id|>", "<|startoftext|>"}) pool.push_back(*t.token_to_id(s));
  std::mt19937 rng(5);
  for (bool skip : {false, true})
    for (int trial = 0; trial < 200; ++trial) {
      TextStream stream(t, skip);
      Ids all;
      while (all.size() < 60) {
        Ids run(rng() % 5);
        for (int32_t& id : run) id = pool[rng() % pool.size()];
        stream.append(run);
        all.insert(all.end(), run.begin(), run.end());
        ASSERT_EQ(stream.text(), t.decode(all, skip)) << "trial " << trial << ", " << all.size() << " ids";
      }
    }
  // Unknown ids: rejected (the stream unchanged), or dropped on request as the engine does.
  TextStream strict(t, true);
  strict.append(Ids{72});
  EXPECT_THROW(strict.append(Ids{73, 126349}), Error);
  EXPECT_EQ(strict.text(), t.decode(Ids{72}));
  TextStream lenient(t, true, /*drop_unknown_ids=*/true);
  lenient.append(Ids{72, 126349, 73, -1});
  EXPECT_EQ(lenient.text(), t.decode(Ids{72, 73}));
}

TEST(Tokenizer, MaxBytesPerTokenBoundsTheTokensOfAText) {
  // The embedded model's tokenizer: byte-level, every byte in the vocabulary; its longest token is
  // the added "<|reserved_token_NN|>" (22 bytes; the longest vocabulary token has 13).
  const Tokenizer t = Tokenizer::from_file(test::default_model_dir() / "tokenizer.json");
  ASSERT_EQ(t.max_bytes_per_token(), 22u);
  for (const std::string& text : {std::string(5000, ' '), std::string(5000, 'a'), std::string("<|endoftext|>") + "x",
                                  std::string(3000, '=') + "\xff\xfe" + std::string(100, '9')}) {
    const size_t tokens = t.encode(text).size();
    EXPECT_GE(tokens, (text.size() + 21) / 22) << text.substr(0, 20);
    EXPECT_LE(tokens, text.size());
  }
  // A vocabulary that cannot spell every byte drops text ("axa" -> [aa]): no bound.
  const auto dir = test::temp_dir();
  const auto p = write(dir, "tiny.json", tiny_tokenizer({{"a", "a"}}, {"aa"}).dump());
  EXPECT_EQ(Tokenizer::from_file(p).max_bytes_per_token(), 0u);
}

TEST(Tokenizer, BpeMergesByRankThenLeftmost) {
  const auto dir = test::temp_dir();
  // Merges: rank 0 "b c", rank 1 "a b", rank 2 "a bc". For "abc" the lowest rank (b c) wins first,
  // leaving a + bc, then "a bc" -> abc. Without rank 0, "a b" would win and "ab c" has no merge.
  const auto p1 = write(dir, "t1.json", tiny_tokenizer({{"b", "c"}, {"a", "b"}, {"a", "bc"}}, {"bc", "ab", "abc"}).dump());
  const Tokenizer t1 = Tokenizer::from_file(p1);
  EXPECT_EQ(t1.encode("abc"), (Ids{*t1.token_to_id("abc")}));
  const auto p2 = write(dir, "t2.json", tiny_tokenizer({{"a", "b"}, {"b", "c"}, {"a", "bc"}}, {"bc", "ab", "abc"}).dump());
  const Tokenizer t2 = Tokenizer::from_file(p2);
  EXPECT_EQ(t2.encode("abc"), (Ids{*t2.token_to_id("ab"), *t2.token_to_id("c")}));
  // Ties on the same pair go leftmost first: "aaa" with "a a" -> [aa, a].
  const auto p3 = write(dir, "t3.json", tiny_tokenizer({{"a", "a"}}, {"aa"}).dump());
  const Tokenizer t3 = Tokenizer::from_file(p3);
  EXPECT_EQ(t3.encode("aaa"), (Ids{*t3.token_to_id("aa"), *t3.token_to_id("a")}));
  EXPECT_EQ(t3.encode("aaaa"), (Ids{*t3.token_to_id("aa"), *t3.token_to_id("aa")}));
  // Characters outside the vocabulary are dropped before merging when there is no unk token
  // (as HF does: "axa" -> [aa]); the space here becomes its own piece "Ġa".
  EXPECT_EQ(t3.encode("axa"), (Ids{*t3.token_to_id("aa")}));
  EXPECT_EQ(t3.encode("a a"), (Ids{*t3.token_to_id("a"), *t3.token_to_id("Ġ"), *t3.token_to_id("a")}));
}

TEST(Tokenizer, TemplateProcessingAddsBos) {
  const auto dir = test::temp_dir();
  json j = tiny_tokenizer({}, {});
  j["added_tokens"] = json::array({{{"id", 4}, {"content", "<s>"}, {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", false}, {"special", true}}});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {4}}, {"tokens", {"<s>"}}}}}}};
  const Tokenizer t = Tokenizer::from_file(write(dir, "bos.json", j.dump()));
  EXPECT_EQ(t.encode("ab", /*add_special_tokens=*/true), (Ids{4, 0, 1}));
  EXPECT_EQ(t.encode("ab", /*add_special_tokens=*/false), (Ids{0, 1}));
  EXPECT_EQ(t.encode("", true), (Ids{4}));
  EXPECT_EQ(t.decode(Ids{4, 0, 1}, true), "ab");
}

TEST(Tokenizer, LoadingErrorsNameFileAndField) {
  const auto dir = test::temp_dir();
  expect_load_error(dir / "missing.json", ErrorCode::kIo, {"missing.json"});
  expect_load_error(write(dir, "notjson.json", "{\"model\": "), ErrorCode::kInvalidCheckpoint, {"notjson.json", "JSON"});

  struct Case {
    std::string name;
    std::function<void(json&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "BPE"}},
      {"nomodel", [](json& j) { j.erase("model"); }, {"'model'"}},
      {"badmerge", [](json& j) { j["model"]["merges"] = json::array({json::array({"a", "zz"})}); }, {"model.merges[0]", "zz"}},
      {"badmerged", [](json& j) { j["model"]["merges"] = json::array({json::array({"a", "b"})}); }, {"model.merges[0]", "ab"}},
      {"badlegacy", [](json& j) { j["model"]["merges"] = {"a b c"}; }, {"model.merges[0]"}},
      {"dupid", [](json& j) { j["model"]["vocab"]["d"] = 0; }, {"model.vocab", "id 0"}},
      {"negid", [](json& j) { j["model"]["vocab"]["d"] = -3; }, {"model.vocab", "\"d\""}},
      // Found by fuzz_tokenizer_load: one id of 113333338 made the loader allocate its dense id
      // table (3.6 GB); ids above kMaxTokenId are refused before anything is sized by them.
      {"hugeid", [](json& j) { j["model"]["vocab"]["d"] = 113333338; }, {"model.vocab", "\"d\"", "113333338"}},
      {"fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback"}},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout"}},
      {"unk", [](json& j) { j["model"]["unk_token"] = "<unk>"; }, {"model.unk_token", "<unk>"}},
      {"nfkc", [](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, {"normalizer.type", "NFKC"}},
      {"seqnorm",
       [](json& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}}; },
       {"normalizer.normalizers[0].type", "Lowercase"}},
      {"whitespace", [](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"pre_tokenizer.type"}},
      {"badregex",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"},
                                  {"invert", false}}}}};
       },
       {"pre_tokenizer.pretokenizers[0].pattern", "(unclosed"}},
      {"nested",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "[a[bc]]"}}}, {"behavior", "Isolated"},
                               {"invert", false}};
       },
       {"pre_tokenizer.pattern", "nested"}},
      {"behavior",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"},
                               {"invert", false}};
       },
       {"pre_tokenizer.behavior", "Sideways"}},
      {"nodecoder", [](json& j) { j["decoder"] = nullptr; }, {"decoder"}},
      {"wpdecoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder.type", "WordPiece"}},
      {"truncation", [](json& j) { j["truncation"] = {{"max_length", 8}}; }, {"truncation"}},
      {"padding", [](json& j) { j["padding"] = {{"strategy", "BatchLongest"}}; }, {"padding"}},
      {"roberta", [](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }, {"post_processor.type"}},
      {"tmplref",
       [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                                {"special_tokens", json::object()}};
       },
       {"post_processor.single[0]", "<s>"}},
      {"addedtype", [](json& j) { j["added_tokens"] = {{{"id", 9}, {"content", 3}}}; }, {"added_tokens[0]"}},
      {"version", [](json& j) { j["version"] = "2.0"; }, {"version"}},
  };
  for (const auto& c : cases) {
    json j = tiny_tokenizer({}, {});
    c.edit(j);
    SCOPED_TRACE(c.name);
    auto needles = c.needles;
    needles.push_back(c.name + ".json");
    expect_load_error(write(dir, c.name + ".json", j.dump()), ErrorCode::kInvalidCheckpoint, needles);
  }
}

TEST(Tokenizer, EncodesGsm8kWellUnderOneSecond) {
  const Tokenizer t = Tokenizer::from_file(realids_path());  // fresh: empty BPE cache
  const auto questions = gsm8k_questions();
  size_t n_ids = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& q : questions) n_ids += t.encode(q).size();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("encode_ms", std::to_string(seconds * 1e3));
  std::printf("encoded %zu questions into %zu ids in %.1f ms\n", questions.size(), n_ids, seconds * 1e3);
  EXPECT_GT(n_ids, questions.size() * 20);
  EXPECT_LT(seconds, 0.5);
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  const Tokenizer t = Tokenizer::from_file(realids_path());
  const auto questions = gsm8k_questions();
  std::vector<Ids> expected;
  for (const auto& q : questions) expected.push_back(realids().encode(q));
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (size_t i = w; i < questions.size() * 2; i += 3) {
        const size_t k = i % questions.size();
        if (t.encode(questions[k]) != expected[k]) ++failures[w];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(failures[w], 0) << "worker " << w;
}

TEST(Tokenizer, LoadsQwen2SlowFilesFromADirectory) {
  // Dream-v0's tokenizer layout (vocab.json + merges.txt + tokenizer_config.json), cut to 4000
  // merges; HF parity on thousands of strings is tests/python/test_tokenizer_parity.py.
  const std::optional<Tokenizer> tok = Tokenizer::from_model_dir(tok_dir() / "qwen2_small");
  ASSERT_TRUE(tok.has_value());
  EXPECT_EQ(tok->vocab_size(), 4256 + 24);
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 4256);
  EXPECT_EQ(tok->token_to_id("<|mask|>"), 4279);
  EXPECT_TRUE(tok->is_special(4279));
  EXPECT_FALSE(tok->is_special(4270));  // <tool_call> is added but not special
  const std::string chat = "<|im_start|>user\nHi 12<|im_end|>";
  const std::vector<int32_t> ids = tok->encode(chat);
  // The Qwen2 split keeps digits one by one and the newline apart (HF: Ċ = 198, Ġ = 220).
  EXPECT_EQ(ids, (std::vector<int32_t>{4257, 872, 198, 39, 72, 220, 16, 17, 4258}));
  EXPECT_EQ(tok->decode(ids), chat);
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "user\nHi 12");

  const auto empty = test::temp_dir() / "no_tokenizer";
  std::filesystem::create_directories(empty);
  EXPECT_FALSE(Tokenizer::from_model_dir(empty).has_value());
}

}  // namespace
}  // namespace flashdllm
