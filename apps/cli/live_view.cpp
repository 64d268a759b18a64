#include "live_view.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace flashdllm::cli {

bool is_tty(int fd) { return ::isatty(fd) == 1; }

namespace {
int terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

/// Rows the text occupies on a terminal `cols` wide (UTF-8 code points counted as one column).
int rows_of(const std::string& text, int cols) {
  int rows = 1, col = 0;
  for (unsigned char ch : text) {
    if (ch == '\n') {
      ++rows;
      col = 0;
      continue;
    }
    if ((ch & 0xC0) == 0x80) continue;  // continuation byte
    if (++col > cols) {
      ++rows;
      col = 1;
    }
  }
  return rows;
}
}  // namespace

LiveView::LiveView(std::function<std::string(const std::vector<int32_t>&)> decode, int32_t mask_id,
                   std::vector<int32_t> stop_ids)
    : decode_(std::move(decode)), mask_id_(mask_id), stop_ids_(std::move(stop_ids)) {}

std::string LiveView::render(const std::vector<int32_t>& canvas) const {
  // Decode maximal runs of committed tokens; each mask shows as one shaded block.
  std::string out;
  std::vector<int32_t> run;
  auto flush = [&] {
    if (!run.empty()) out += decode_(run);
    run.clear();
  };
  for (int32_t id : canvas) {
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
      flush();
      out += "\u00b7";  // committed end-of-text padding
    } else if (id == mask_id_) {
      flush();
      out += "\u2591";
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

void LiveView::update(size_t /*request*/, const std::vector<int32_t>& canvas, bool /*done*/) {
  std::string frame = render(canvas);
  // Back to the first row of the previous frame, then clear to the end of the screen.
  // (CSI 0 A would still move one row up, so the one-row case only returns to column 0.)
  if (lines_drawn_ > 1) std::fprintf(stderr, "\r\x1b[%dA\x1b[J", lines_drawn_ - 1);
  else if (lines_drawn_ == 1) std::fputs("\r\x1b[J", stderr);
  std::fputs(frame.c_str(), stderr);
  std::fflush(stderr);
  lines_drawn_ = rows_of(frame, terminal_columns());
}

void LiveView::finish() {
  if (lines_drawn_ > 0) std::fputs("\n", stderr);
  lines_drawn_ = 0;
}

}  // namespace flashdllm::cli
