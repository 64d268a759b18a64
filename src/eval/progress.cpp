#include "eval/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace flashdllm::eval {

std::string format_duration(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "--:--";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  const int64_t h = t / 3600, m = (t / 60) % 60, sec = t % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, sec) : fmt::format("{}:{:02}", m, sec);
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit, FILE* out, std::optional<bool> tty,
                         double interval_s)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(std::max<int64_t>(total, 0)),
      out_(out ? out : stderr),
      tty_(tty.value_or(isatty(fileno(out ? out : stderr)) != 0)),
      interval_s_(interval_s),
      t0_(std::chrono::steady_clock::now()) {}

double ProgressBar::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

std::string ProgressBar::line(int64_t done, double seconds, const std::string& extra) const {
  const double frac = total_ > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0) : 1.0;
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : -1.0;
  std::string s = fmt::format("[{}] ", label_);
  if (tty_) {
    constexpr int kWidth = 24;
    const int fill = static_cast<int>(std::floor(frac * kWidth));
    s += '|';
    s.append(static_cast<size_t>(fill), '#');
    s.append(static_cast<size_t>(kWidth - fill), '.');
    s += "| ";
  }
  s += fmt::format("{}/{} ({:.0f}%)  {:.2f} {}/s  elapsed {}  ETA {}", done, total_, 100.0 * frac, rate, unit_,
                   format_duration(seconds), done >= total_ ? "0:00" : format_duration(eta));
  if (!extra.empty()) s += "  " + extra;
  return s;
}

void ProgressBar::draw(int64_t done, const std::string& extra, bool final, bool force) {
  const double t = elapsed();
  if (!final && !force) {
    if (tty_ && t - last_draw_ < 0.1) return;
    if (!tty_ && t - last_draw_ < interval_s_) return;
  }
  last_draw_ = t;
  const std::string l = line(done, t, extra);
  if (tty_)
    std::fprintf(out_, "\r%s\x1b[K%s", l.c_str(), final ? "\n" : "");
  else
    std::fprintf(out_, "%s\n", l.c_str());
  std::fflush(out_);
}

void ProgressBar::update(int64_t done, const std::string& extra) {
  if (finished_) return;
  // The first update draws at once (a line at the start), later ones at most every interval.
  draw(done, extra, false, last_draw_ < -1e8);
}

void ProgressBar::finish(const std::string& extra) { finish(total_, extra); }

void ProgressBar::finish(int64_t done, const std::string& extra) {
  if (finished_) return;
  finished_ = true;
  draw(done, extra, true, true);
}

}  // namespace flashdllm::eval
