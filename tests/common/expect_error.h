// expect_error: runs a callable and checks that it throws flashdllm::Error with a given code and a
// message holding every given part (file, field, tensor names). Shared by the hardening tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "flashdllm/status.h"

namespace flashdllm::test {

/// Expects `fn` to throw Error(code) whose message contains every string of `parts`; records a
/// test failure otherwise. Returns the message ("" when nothing or something else was thrown).
inline std::string expect_error(const std::function<void()>& fn, ErrorCode code,
                                const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), code) << "message: " << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

}  // namespace flashdllm::test
