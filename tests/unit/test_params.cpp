// The decoding parameters' validation (params.cpp) names the parameter at fault in Error::field(),
// by its canonical key, so callers (the server's OpenAI `param`) never read the message.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "flashdllm/params.h"
#include "flashdllm/status.h"

namespace flashdllm::test {
namespace {

/// The field of the Error that `f` throws ("<no error>" when it does not throw).
std::string field_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.field();
  }
  return "<no error>";
}

std::string field_of_options(const std::function<void(GenerateOptions&)>& edit) {
  GenerateOptions o;
  edit(o);
  return field_of([&] { validate_without_model(o); });
}

TEST(ParamsErrors, ValidationNamesTheFieldAtFault) {
  EXPECT_EQ(field_of_options([](GenerateOptions&) {}), "<no error>");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) { o.sampling.gen_length = 0; }), "gen_length");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) { o.sampling.temperature = -1; }), "temperature");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) { o.sampling.threshold = 1.5; }), "threshold");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) { o.sampling.steps = 4; }), "steps");  // flash: no steps
  EXPECT_EQ(field_of_options([](GenerateOptions& o) { o.sampling.stop = {""}; }), "stop");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) { o.decode.mask_num = 0; }), "mask_num");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) { o.decode.n_slots = -1; }), "n_slots");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) { o.decode.forced_acceptance = 2; }), "forced_acceptance");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) {
              o.decode.verify = true;
              o.decode.gamma = 0.0;
            }),
            "gamma");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) {
              o.decode.cache = CacheMode::kNone;
              o.decode.sampler = Sampler::kLlada;
              o.sampling.gen_length = 100;  // blocks of 32
            }),
            "gen_length");
  // Sampler auto: the model decides (Dream's sampler has no blocks), so only validate(o, cfg) can refuse.
  EXPECT_EQ(field_of_options([](GenerateOptions& o) {
              o.decode.cache = CacheMode::kNone;
              o.sampling.gen_length = 100;
            }),
            "<no error>");
  EXPECT_EQ(field_of_options([](GenerateOptions& o) {
              o.decode.cache = CacheMode::kDual;
              o.sampling.steps = 30;  // 4 blocks
            }),
            "steps");
}

TEST(ParamsErrors, SetOptionNamesTheKey) {
  GenerateOptions o;
  EXPECT_EQ(field_of([&] { set_option(o, "temperature", "-2"); }), "temperature");
  EXPECT_EQ(field_of([&] { set_option(o, "gen-length", "x"); }), "gen_length");
  EXPECT_EQ(field_of([&] { set_option(o, "track_num", "x"); }), "track_num");
}

TEST(ParamsErrors, OtherErrorsHaveNoField) {
  const Error e(ErrorCode::kInvalidArgument, "a message");
  EXPECT_TRUE(e.field().empty());
}

}  // namespace
}  // namespace flashdllm::test
