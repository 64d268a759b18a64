// Jinja rendering on minja, with transformers' environment and cost bounds (see jinja.h).
#include "io/jinja.h"

#include <pthread.h>

#include <cstring>
#include <ctime>
#include <exception>
#include <mutex>
#include <utility>

#include <minja/minja.hpp>

#include "core/check.h"

namespace flashdllm::jinja {
namespace {

/// Runs `fn` on a fresh thread whose stack is kWorkerStackBytes (address space, committed as
/// touched) and rethrows what it throws. minja recurses per nesting level and its std::regex lexer
/// per character of a comment or string; the caller's stack (an HTTP worker's) may be small.
template <typename Fn>
void run_on_big_stack(Fn&& fn) {
  struct Job {
    Fn* fn;
    std::exception_ptr error;
  } job{&fn, nullptr};
  pthread_attr_t attr;
  FDLLM_ASSERT(pthread_attr_init(&attr) == 0);
  FDLLM_ASSERT(pthread_attr_setstacksize(&attr, kWorkerStackBytes) == 0);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        auto* j = static_cast<Job*>(p);
        try {
          (*j->fn)();
        } catch (...) {
          j->error = std::current_exception();
        }
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  FDLLM_CHECK(rc == 0, ErrorCode::kInternal, "cannot start the template thread: {}", std::strerror(rc));
  pthread_join(thread, nullptr);
  if (job.error) std::rethrow_exception(job.error);
}

/// What one render may still spend, and where its stack began.
struct Budget {
  uintptr_t stack_base = 0;
  uint64_t lookups = 0;
  int64_t range_items = 0;
};

uintptr_t stack_address() {
  volatile char probe = 0;
  return reinterpret_cast<uintptr_t>(&probe);
}

/// The top-level context: every lookup that reaches the globals (minja resolves names through
/// the chain of scopes, so every macro call and most expressions do) pays into the budget.
class BudgetedContext : public minja::Context {
 public:
  BudgetedContext(minja::Value&& values, const std::shared_ptr<minja::Context>& parent, Budget* budget)
      : minja::Context(std::move(values), parent), budget_(budget) {}
  minja::Value get(const minja::Value& key) override {
    charge();
    return minja::Context::get(key);
  }
  minja::Value& at(const minja::Value& key) override {
    charge();
    return minja::Context::at(key);
  }
  bool contains(const minja::Value& key) override {
    charge();
    return minja::Context::contains(key);
  }

 private:
  void charge() {
    const uintptr_t here = stack_address();
    const uintptr_t used = budget_->stack_base > here ? budget_->stack_base - here : here - budget_->stack_base;
    if (++budget_->lookups > kMaxLookups || used > kMaxRenderStack) {
      throw std::runtime_error(fmt::format(
          "the template exceeds its cost bound ({} variable lookups, {} KiB of stack: a loop or a recursion "
          "without end?)",
          budget_->lookups, used >> 10));
    }
  }
  Budget* budget_;
};

/// Python's range(start, stop[, step]) as a list, counted against the render's budget.
minja::Value bounded_range(Budget* budget, minja::ArgumentsValue& args) {
  args.expectArgs("range", {1, 3}, {0, 0});
  int64_t v[3] = {0, 0, 1};
  if (args.args.size() == 1) {
    v[1] = args.args[0].get<int64_t>();
  } else {
    for (size_t i = 0; i < args.args.size(); ++i) v[i] = args.args[i].get<int64_t>();
  }
  const auto [start, stop, step] = std::tuple(v[0], v[1], v[2]);
  if (step == 0) throw std::runtime_error("range() arg 3 must not be zero");
  // Item count without overflow: ceil((stop - start) / step) when positive.
  const long double n =
      step > 0 ? (static_cast<long double>(stop) - start) / step : (static_cast<long double>(start) - stop) / -step;
  const int64_t count = n <= 0 ? 0 : static_cast<int64_t>(n) + (n > static_cast<int64_t>(n) ? 1 : 0);
  if (count > kMaxRangeItems - budget->range_items) {
    throw std::runtime_error(
        fmt::format("range() of {} items exceeds the template's bound of {} per render", count, kMaxRangeItems));
  }
  budget->range_items += count;
  auto out = minja::Value::array();
  for (int64_t i = 0; i < count; ++i) out.push_back(minja::Value(static_cast<int64_t>(start + i * step)));
  return out;
}

/// Globals and filters as transformers sets them (minja's builtins, with Python's `trim`,
/// `strftime_now` and a bounded `range`).
std::shared_ptr<minja::Context> make_globals(Budget* budget) {
  auto globals = minja::Context::builtins();
  globals->set("trim", minja::Value::callable([](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
                 args.expectArgs("trim", {1, 1}, {0, 0});
                 const minja::Value& text = args.args[0];
                 if (text.is_null()) return text;
                 return minja::Value(std::string(python_strip(text.get<std::string>())));
               }));
  globals->set("strftime_now",
               minja::Value::callable([](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
                 args.expectArgs("strftime_now", {1, 1}, {0, 0});
                 const std::time_t now = std::time(nullptr);
                 std::tm local{};
                 localtime_r(&now, &local);
                 char buf[256];
                 const size_t n = std::strftime(buf, sizeof buf, args.args[0].get<std::string>().c_str(), &local);
                 return minja::Value(std::string(buf, n));
               }));
  globals->set("range",
               minja::Value::callable([budget](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
                 return bounded_range(budget, args);
               }));
  return globals;
}

/// minja appends the template's lines at each level an error passes through: keep the start.
std::string clip(std::string_view what) {
  constexpr size_t kMax = 2000;
  if (what.size() <= kMax) return std::string(what);
  return fmt::format("{} ... ({} bytes more)", what.substr(0, kMax), what.size() - kMax);
}

/// Python str.isspace(): bidi class WS, B or S, or Zs.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/// Decodes the code point starting at byte i if it is valid UTF-8 (returns its length, 0 if invalid).
size_t decode_at(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t len;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  const char32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace

struct Template::Impl {
  std::string origin;
  std::shared_ptr<minja::TemplateNode> root;
  mutable std::mutex mu;  // renders one at a time: minja does not say its trees may be shared
};

Template Template::parse(std::string_view source, std::string origin) {
  FDLLM_CHECK_CKPT(source.size() <= kMaxTemplateBytes,
                   "{}: the template is {} bytes, more than the {} this build renders", origin, source.size(),
                   kMaxTemplateBytes);
  auto impl = std::make_shared<Impl>();
  impl->origin = std::move(origin);
  const std::string text(source);
  try {
    run_on_big_stack([&] {
      // transformers: jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).
      impl->root = minja::Parser::parse(
          text, minja::Options{.trim_blocks = true, .lstrip_blocks = true, .keep_trailing_newline = false});
    });
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    FDLLM_FAIL(ErrorCode::kInvalidCheckpoint, "{}: the template does not parse: {}", impl->origin, clip(e.what()));
  }
  Template t;
  t.impl_ = std::move(impl);
  return t;
}

std::string Template::render(const nlohmann::ordered_json& variables) const {
  FDLLM_ASSERT(impl_ && variables.is_object());
  std::string out;
  Budget budget;
  const std::lock_guard lock(impl_->mu);
  try {
    run_on_big_stack([&] {
      budget.stack_base = stack_address();
      auto context = std::make_shared<BudgetedContext>(minja::Value(variables), make_globals(&budget), &budget);
      out = impl_->root->render(context);
    });
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: rendering the template failed: {}", impl_->origin, clip(e.what()));
  }
  return out;
}

const std::string& Template::origin() const noexcept { return impl_->origin; }

std::string_view python_strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    char32_t cp = 0;
    const size_t len = decode_at(s, begin, cp);
    if (len == 0 || !is_python_space(cp)) break;
    begin += len;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t k = end - 1;
    while (k > begin && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && end - k < 4) --k;
    char32_t cp = 0;
    const size_t len = decode_at(s, k, cp);
    if (len == 0 || k + len != end || !is_python_space(cp)) break;
    end = k;
  }
  return s.substr(begin, end - begin);
}

}  // namespace flashdllm::jinja
