// Live denoising view for terminals: redraws the canvas after every step, masks shown as '░'
// turning into text as tokens commit. Only used when stderr is a TTY.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flashdllm::cli {

class LiveView {
 public:
  /// decode: ids -> text (special tokens skipped); mask_id marks undecoded positions.
  LiveView(std::function<std::string(const std::vector<int32_t>&)> decode, int32_t mask_id,
           std::vector<int32_t> stop_ids);
  /// Redraws request `request`'s canvas.
  void update(size_t request, const std::vector<int32_t>& canvas, bool done);
  /// Leaves the last frame on screen and moves below it.
  void finish();

 private:
  std::string render(const std::vector<int32_t>& canvas) const;
  std::function<std::string(const std::vector<int32_t>&)> decode_;
  int32_t mask_id_;
  std::vector<int32_t> stop_ids_;
  int lines_drawn_ = 0;
};

/// True when file descriptor `fd` is a terminal.
bool is_tty(int fd);

}  // namespace flashdllm::cli
