// The live-denoising page served at `/`: type a prompt, watch the canvas of [MASK] cells turn into
// text as the engine commits tokens (the stream_canvas events of /v1/chat/completions), and the
// stable answer grow beside it. Self-contained HTML + JavaScript, no external resources.
#pragma once

#include <string>

namespace flashdllm::server {

/// The page for the served model `model_id` (HTML-escaped into it).
std::string live_page_html(const std::string& model_id);

}  // namespace flashdllm::server
