// Unit tests of flashdllm::ChatTemplate (src/io/chat_template.cpp). The renderer is compared with
// jinja2 rendering of the real template text in tests/python/test_chat_template.py; here: the exact
// §A.5 form, trimming, multi-turn, other templates, loading and render errors, cost bounds, and
// tokenization of the rendered prompt (special tokens as single ids).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/test_paths.h"
#include "flashdllm/status.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace flashdllm {
namespace {

using json = nlohmann::json;

std::filesystem::path llada_config() { return test::repo_data_dir() / "llada-8b-instruct" / "tokenizer_config.json"; }

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::filesystem::path write_config(const std::string& name, const json& cfg) {
  const auto p = test::temp_dir() / name;
  std::ofstream(p) << cfg.dump();
  return p;
}

const std::string kHeaderUser = "<|start_header_id|>user<|end_header_id|>\n\n";
const std::string kHeaderAssistant = "<|start_header_id|>assistant<|end_header_id|>\n\n";

TEST(ChatTemplate, SingleUserMessageMatchesReference) {
  const ChatTemplate t = ChatTemplate::from_tokenizer_config(llada_config());
  EXPECT_EQ(t.bos_token(), "<|startoftext|>");
  EXPECT_EQ(t.render({{"user", "  What is 2+2?\n"}}),
            "<|startoftext|>" + kHeaderUser + "What is 2+2?<|eot_id|>" + kHeaderAssistant);
}

TEST(ChatTemplate, MultiTurnAndEmpty) {
  const ChatTemplate t = ChatTemplate::llada("<BOS>");
  EXPECT_EQ(t.render({{"system", " Be brief. "}, {"user", "Hi"}, {"assistant", "Hello!\n"}, {"user", "Bye"}}),
            "<BOS><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" + kHeaderUser +
                "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>" + kHeaderUser +
                "Bye<|eot_id|>" + kHeaderAssistant);
  // No messages: no BOS (it is attached to the first message), just the assistant header.
  EXPECT_EQ(t.render({}), kHeaderAssistant);
  EXPECT_EQ(t.render({{"user", ""}}), "<BOS>" + kHeaderUser + "<|eot_id|>" + kHeaderAssistant);
}

TEST(ChatTemplate, TrimsPythonWhitespaceOnly) {
  const ChatTemplate t = ChatTemplate::llada("");
  auto body = [&](const std::string& content) {
    const std::string r = t.render({{"user", content}});
    const size_t a = kHeaderUser.size(), b = r.find("<|eot_id|>");
    return r.substr(a, b - a);
  };
  // str.strip() removes Unicode whitespace, including U+001C..U+001F, U+0085, U+00A0, U+3000 ...
  EXPECT_EQ(body("\u3000\u00a0\x1c\t x \u2029\u0085\r\n"), "x");
  EXPECT_EQ(body(" \u2003a b\u2003 "), "a b");
  // ... but not U+180E, U+200B, U+FEFF (not whitespace in Unicode 6.3+).
  EXPECT_EQ(body("\u200bx\u180e"), "\u200bx\u180e");
  EXPECT_EQ(body("\ufeff x"), "\ufeff x");
  EXPECT_EQ(body(" \n\t "), "");
  // Invalid UTF-8 is kept as is.
  EXPECT_EQ(body(" \xff x \xe2\x82 "), "\xff x \xe2\x82");
}

TEST(ChatTemplate, RenderedPromptTokenizesWithSingleSpecialIds) {
  const ChatTemplate t = ChatTemplate::from_tokenizer_config(llada_config());
  const Tokenizer tok = Tokenizer::from_file(test::test_data_dir() / "tokenizer" / "llada_realids.tokenizer.json");
  const std::vector<int32_t> ids = tok.encode(t.render({{"user", "What is 2+2?"}}));
  ASSERT_GT(ids.size(), 8u);
  std::vector<int32_t> specials;
  for (int32_t id : ids) {
    if (tok.is_special(id)) specials.push_back(id);
  }
  EXPECT_EQ(specials, (std::vector<int32_t>{126080, 126346, 126347, 126348, 126346, 126347}));
  EXPECT_EQ(ids.front(), 126080);
  EXPECT_EQ(tok.decode(ids), t.render({{"user", "What is 2+2?"}}));
}

TEST(ChatTemplate, AcceptsWhitespaceVariantsAndObjectBos) {
  json cfg = read_json(llada_config());
  std::string tmpl = cfg["chat_template"].get<std::string>();
  for (size_t pos = 0; (pos = tmpl.find("{%", pos)) != std::string::npos; pos += 4) tmpl.replace(pos, 2, "{%  ");
  cfg["chat_template"] = tmpl;
  cfg["bos_token"] = {{"content", "<|startoftext|>"}, {"lstrip", false}};
  const ChatTemplate t = ChatTemplate::from_tokenizer_config(write_config("spaced.json", cfg));
  EXPECT_EQ(t.bos_token(), "<|startoftext|>");
}

void expect_config_error(const std::filesystem::path& p, ErrorCode code, const std::vector<std::string>& needles) {
  try {
    (void)ChatTemplate::from_tokenizer_config(p);
    FAIL() << "no error for " << p;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p.filename().string()), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg << " lacks " << n;
  }
}

TEST(ChatTemplate, RendersOtherTemplates) {
  const json base = read_json(llada_config());
  const std::string tmpl = base["chat_template"].get<std::string>();
  json chatml = base;
  chatml["chat_template"] =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  const ChatTemplate c = ChatTemplate::from_tokenizer_config(write_config("chatml.json", chatml));
  EXPECT_EQ(c.render({{"user", " Hi "}}), "<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(c.render({{"user", " Hi "}}, false), "<|im_start|>user\n Hi <|im_end|>\n");

  // A single trailing newline is dropped (jinja2's keep_trailing_newline=False): LLaDA's output.
  json trailing = base;
  trailing["chat_template"] = tmpl + "\n";
  const ChatTemplate t = ChatTemplate::from_tokenizer_config(write_config("trailing.json", trailing));
  EXPECT_EQ(t.render({{"user", "x"}}), ChatTemplate::llada("<|startoftext|>").render({{"user", "x"}}));

  json list = base;  // named templates: "default" is used
  list["chat_template"] =
      json::array({{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", tmpl}}});
  const ChatTemplate l = ChatTemplate::from_tokenizer_config(write_config("list.json", list));
  EXPECT_EQ(l.render({{"user", "x"}}), t.render({{"user", "x"}}));
}

TEST(ChatTemplate, RejectsBadConfigs) {
  expect_config_error(test::temp_dir() / "absent.json", ErrorCode::kIo, {});
  const json base = read_json(llada_config());

  json missing = base;
  missing.erase("chat_template");
  expect_config_error(write_config("missing.json", missing), ErrorCode::kInvalidCheckpoint, {"chat_template", "--raw"});

  json no_default = base;
  no_default["chat_template"] = json::array({{{"name", "tool_use"}, {"template", "T"}}});
  expect_config_error(write_config("nodefault.json", no_default), ErrorCode::kInvalidCheckpoint,
                      {"chat_template", "default"});

  json number = base;
  number["chat_template"] = 5;
  expect_config_error(write_config("number.json", number), ErrorCode::kInvalidCheckpoint, {"chat_template"});

  json syntax = base;
  syntax["chat_template"] = "{% for m in messages %}{{ m.content }}";
  expect_config_error(write_config("syntax.json", syntax), ErrorCode::kInvalidCheckpoint,
                      {"chat_template", "does not parse"});

  json huge = base;
  huge["chat_template"] = std::string(40000, 'x');
  expect_config_error(write_config("huge.json", huge), ErrorCode::kInvalidCheckpoint, {"chat_template", "40000"});

  json badbos = base;
  badbos["bos_token"] = 7;
  expect_config_error(write_config("badbos.json", badbos), ErrorCode::kInvalidCheckpoint, {"bos_token"});

  const auto notjson = test::temp_dir() / "notjson.json";
  std::ofstream(notjson) << "{ \"chat_template\": ";
  expect_config_error(notjson, ErrorCode::kInvalidCheckpoint, {"JSON"});
}

void expect_render_error(const std::string& name, const std::string& tmpl, const std::string& needle) {
  json cfg = read_json(llada_config());
  cfg["chat_template"] = tmpl;
  const auto path = write_config(name, cfg);
  const ChatTemplate t = ChatTemplate::from_tokenizer_config(path);
  try {
    (void)t.render({{"user", "x"}});
    FAIL() << "no error for " << tmpl;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg << " lacks " << needle;
    EXPECT_LT(msg.size(), 3000u);
  }
}

TEST(ChatTemplate, RenderErrorsNameTheFileAndCostIsBounded) {
  expect_render_error("raise.json", "{{ raise_exception('roles must alternate') }}", "roles must alternate");
  expect_render_error("range.json", "{% for i in range(10**12) %}{% endfor %}", "range()");
  expect_render_error("rec.json", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "cost bound");
  expect_render_error("loops.json",
                      "{% for i in 'x' * 1100 %}{% for j in 'x' * 1000 %}{{ bos_token }}{% endfor %}{% endfor %}",
                      "cost bound");
}

}  // namespace
}  // namespace flashdllm
