#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace flashdllm {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("flashdllm");
    l->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *instance;
}

}  // namespace flashdllm
