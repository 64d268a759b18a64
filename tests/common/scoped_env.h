// An environment variable set for a scope (tests of options read from the environment).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace flashdllm::test {

/// Sets `name` to `value` (unsets it for nullptr) and restores what it was, also when the scope
/// is left by an exception.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved_)
      setenv(name_.c_str(), saved_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace flashdllm::test
