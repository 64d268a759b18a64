// Progress display for long runs (eval, bench): on a terminal a bar redrawn in place with rate and
// ETA; otherwise (logs, CI) plain lines at most every `interval_s` seconds plus a final line.
//
//   ProgressBar bar("eval gsm8k", 1319, "samples");
//   bar.update(17);           // thread-compatible, not thread-safe: call from one thread at a time
//   bar.finish();
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace flashdllm::eval {

class ProgressBar {
 public:
  /// `out`: where to draw (default stderr); `tty`: force terminal/plain mode (default: isatty(out));
  /// `interval_s`: minimum seconds between plain lines (terminal redraws are limited to 10 per second).
  ProgressBar(std::string label, int64_t total, std::string unit = "samples", FILE* out = stderr,
              std::optional<bool> tty = std::nullopt, double interval_s = 10.0);

  /// Reports `done` of `total` finished; `extra` is appended to the line (e.g. "152 tok/s").
  void update(int64_t done, const std::string& extra = "");
  /// Draws the final state (done = total unless given) and ends the line.
  void finish(const std::string& extra = "");
  void finish(int64_t done, const std::string& extra);

  /// The text of one progress line for `done` after `seconds` (no carriage return / newline).
  std::string line(int64_t done, double seconds, const std::string& extra) const;
  bool tty() const noexcept { return tty_; }

 private:
  double elapsed() const;
  void draw(int64_t done, const std::string& extra, bool final, bool force);

  std::string label_, unit_;
  int64_t total_;
  FILE* out_;
  bool tty_;
  double interval_s_;
  std::chrono::steady_clock::time_point t0_;
  double last_draw_ = -1e9;
  bool finished_ = false;
};

/// "1:02:03" / "4:05" for a duration in seconds ("--:--" when negative or not finite).
std::string format_duration(double seconds);

}  // namespace flashdllm::eval
