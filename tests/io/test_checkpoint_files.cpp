// Checkpoint files that are not regular files (issue 15, item 9): a FIFO, /dev/zero or a directory
// in place of config.json, tokenizer.json, tokenizer_config.json, model.safetensors, the index or a
// shard must be refused at once with Error(kIo) "<path>: not a regular file (...)". Before the fix a
// FIFO blocked forever in open() (and /dev/zero as config.json was read without end).
//
// A FIFO nobody writes to would hang the test on a regression, so a helper thread keeps opening the
// FIFO for writing (non-blocking, which only succeeds once a reader is blocked in open) and closes it
// again at once: a blocked reader is released after ~1 s and then fails the timing check instead of
// hanging.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/expect_error.h"
#include "common/test_paths.h"
#include "io/chat_template.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

namespace fs = std::filesystem;

/// Releases readers blocked in open() on `fifo` (see the file comment) while alive.
class FifoReleaser {
 public:
  explicit FifoReleaser(fs::path fifo) : fifo_(std::move(fifo)), thread_([this] { run(); }) {}
  ~FifoReleaser() {
    stop_ = true;
    thread_.join();
  }

 private:
  void run() {
    const auto start = std::chrono::steady_clock::now();
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) continue;
      const int fd = ::open(fifo_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
    }
  }
  fs::path fifo_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void make_fifo(const fs::path& p) {
  fs::remove(p);
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
}

/// `fn` on a FIFO at `fifo` must throw Error(kIo) naming it as not a regular file, within 0.5 s.
void expect_fifo_refused(const fs::path& fifo, const std::function<void()>& fn) {
  make_fifo(fifo);
  FifoReleaser releaser(fifo);
  const auto t0 = std::chrono::steady_clock::now();
  test::expect_error(fn, ErrorCode::kIo, {fifo.string(), "not a regular file", "FIFO"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 0.5) << fifo << ": blocked for " << s << " s";
}

/// A copy of the golden checkpoint directory (config.json + model.safetensors) in a temp dir.
fs::path golden_copy() {
  const fs::path dir = test::temp_dir() / "ckpt";
  fs::create_directories(dir);
  fs::copy_file(test::golden_dir() / "config.json", dir / "config.json");
  fs::copy_file(test::golden_dir() / "model.safetensors", dir / "model.safetensors");
  return dir;
}

TEST(CheckpointFiles, FifoConfigIsRefused) {
  const fs::path dir = test::temp_dir();
  expect_fifo_refused(dir / "config.json", [&] { load_model_config(dir / "config.json"); });
}

TEST(CheckpointFiles, FifoTokenizerFilesAreRefused) {
  const fs::path dir = test::temp_dir();
  expect_fifo_refused(dir / "tokenizer.json", [&] { Tokenizer::from_file(dir / "tokenizer.json"); });
  expect_fifo_refused(dir / "tokenizer_config.json",
                      [&] { ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json"); });
}

TEST(CheckpointFiles, FifoSafetensorsFileIsRefused) {
  const fs::path dir = golden_copy();
  fs::remove(dir / "model.safetensors");
  expect_fifo_refused(dir / "model.safetensors", [&] { Checkpoint::open(dir); });
}

TEST(CheckpointFiles, FifoIndexAndShardAreRefused) {
  const fs::path dir = test::temp_dir();
  const ModelConfig cfg = load_model_config(test::golden_dir() / "config.json");
  expect_fifo_refused(dir / "model.safetensors.index.json", [&] { Checkpoint::open(dir); });
  expect_fifo_refused(dir / "model.safetensors.index.json",
                      [&] { validate_model_index(dir / "model.safetensors.index.json", cfg); });
  fs::remove(dir / "model.safetensors.index.json");
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"model.transformer.wte.weight": "model-00001-of-00001.safetensors"}})";
  expect_fifo_refused(dir / "model-00001-of-00001.safetensors", [&] { Checkpoint::open(dir); });
}

TEST(CheckpointFiles, DeviceAndDirectoryAreRefused) {
  test::expect_error([] { load_model_config("/dev/zero"); }, ErrorCode::kIo,
                     {"/dev/zero", "not a regular file", "character device"});
  test::expect_error([] { Tokenizer::from_file("/dev/zero"); }, ErrorCode::kIo, {"/dev/zero", "not a regular file"});
  const fs::path dir = test::temp_dir();
  fs::create_directories(dir / "config.json");
  test::expect_error([&] { load_model_config(dir / "config.json"); }, ErrorCode::kIo,
                     {(dir / "config.json").string(), "not a regular file", "a directory"});
}

TEST(CheckpointFiles, RegularFilesStillRead) {
  const fs::path dir = golden_copy();
  EXPECT_EQ(read_regular_file(dir / "config.json").size(), fs::file_size(dir / "config.json"));
  EXPECT_NO_THROW(Checkpoint::open(dir));
  test::expect_error([&] { read_regular_file(dir / "absent.json"); }, ErrorCode::kIo,
                     {(dir / "absent.json").string(), "cannot open"});
}

TEST(CheckpointFiles, DuplicateKeysInConfigAndChatTemplateAreRefused) {
  // nlohmann keeps the last of two equal keys: "d_model": 256, "d_model": 512 then failed on the
  // embedding's shape, far from the cause.
  const fs::path dir = golden_copy();
  std::string text = read_regular_file(dir / "config.json");
  text.insert(text.find('{') + 1, "\"d_model\": 7, ");
  std::ofstream(dir / "config.json", std::ios::trunc) << text;
  test::expect_error([&] { load_model_config(dir / "config.json"); }, ErrorCode::kInvalidCheckpoint,
                     {(dir / "config.json").string(), "duplicate key 'd_model'"});
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "a", "chat_template": "b"})";
  test::expect_error([&] { ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json"); },
                     ErrorCode::kInvalidCheckpoint, {"tokenizer_config.json", "duplicate key 'chat_template'"});
}

TEST(CheckpointFiles, FindChatTemplateTellsNoneFromUnusable) {
  const fs::path dir = test::temp_dir() / "chat_lookup";
  fs::create_directories(dir);
  ChatTemplateLookup r = find_chat_template(dir);  // no tokenizer_config.json: a base model
  EXPECT_FALSE(r.chat.has_value());
  EXPECT_FALSE(r.unusable);
  EXPECT_NE(r.error.find("has no tokenizer_config.json"), std::string::npos) << r.error;
  const auto with = [&](const std::string& text) {
    std::ofstream(dir / "tokenizer_config.json", std::ios::trunc) << text;
    return find_chat_template(dir);
  };
  for (const char* none : {R"({"bos_token": "<s>"})", R"({"chat_template": null})"}) {
    r = with(none);
    EXPECT_FALSE(r.chat.has_value()) << none;
    EXPECT_FALSE(r.unusable) << none;
  }
  for (const char* bad : {"garbage", "[1, 2]", R"({"chat_template": "{% if %}"})", R"({"chat_template": 5})"}) {
    r = with(bad);
    EXPECT_FALSE(r.chat.has_value()) << bad;
    EXPECT_TRUE(r.unusable) << bad;
    EXPECT_NE(r.error.find("tokenizer_config.json"), std::string::npos) << bad << ": " << r.error;
  }
  fs::copy_file(test::default_model_dir() / "tokenizer_config.json", dir / "tokenizer_config.json",
                fs::copy_options::overwrite_existing);
  r = find_chat_template(dir);
  EXPECT_TRUE(r.chat.has_value()) << r.error;
  EXPECT_FALSE(r.unusable);
}

TEST(JsonText, NestingDepthCountsBracketsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("", 8), 0);
  EXPECT_EQ(json_nesting_depth("5", 8), 0);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}]})", 8), 4);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{", "b": "\\"})", 8), 1);  // brackets in strings, escaped backslash
  EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[[["})", 8), 1);               // an escaped quote stays in the string
  EXPECT_EQ(json_nesting_depth("[[[]]][[]]", 8), 3);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(json_nesting_depth(deep, 32), 33);  // stops past the limit
  EXPECT_EQ(json_nesting_depth(deep, 100000), 100000);
}

TEST(JsonText, TryParseReportsInsteadOfThrowing) {
  std::string error, duplicate;
  nlohmann::json j = try_parse_json(R"({"a": 1, "b": {"a": 2}})", /*reject_duplicate_keys=*/true, &error, &duplicate);
  ASSERT_FALSE(j.is_discarded()) << error;  // the same key in two objects is no duplicate
  EXPECT_EQ(j["b"]["a"], 2);
  j = try_parse_json(R"({"a": 1, "b": {"c": 2, "c": 3}})", true, &error, &duplicate);
  EXPECT_TRUE(j.is_discarded());
  EXPECT_EQ(duplicate, "c");
  duplicate.clear();
  j = try_parse_json(R"({"c": 2, "c": 3})", /*reject_duplicate_keys=*/false, &error, &duplicate);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["c"], 3);
  EXPECT_TRUE(duplicate.empty());
  j = try_parse_json("{not json", true, &error, &duplicate);
  EXPECT_TRUE(j.is_discarded());
  EXPECT_TRUE(duplicate.empty());
  EXPECT_NE(error.find("parse error"), std::string::npos) << error;
}

}  // namespace
}  // namespace flashdllm
