// A scheduled request's answer (the answer rules of scheduler.h): after each iteration its stable
// prefix, end id, max_output_tokens and stop strings (update_answer, with the text sent as
// deltas), and at the end its GenerateResult (make_result). The queue and the steps are in
// scheduler.cpp.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/scheduler.h"
#include "engine/scheduler_request.h"

namespace flashdllm {

namespace {

/// Bytes of `text` that can be sent before the answer is decided: without a trailing U+FFFD (the
/// lossy decode of a UTF-8 sequence cut by a token boundary, completed by a later token) and
/// without a suffix that could be the start of a stop string.
size_t stable_text_length(const std::string& text, const std::vector<std::string>& stops) {
  size_t n = text.size();
  static const std::string kReplacement = "\xEF\xBF\xBD";
  while (n >= 3 && text.compare(n - 3, 3, kReplacement) == 0) n -= 3;
  size_t hold = 0;
  for (const std::string& s : stops)
    for (size_t k = std::min(s.size() - 1, n); k > hold; --k)
      if (text.compare(n - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return n - hold;
}

}  // namespace

bool Scheduler::update_answer(Request& r, std::span<const int32_t> canvas, bool denoiser_finished, RequestEvent& ev) {
  if (!r.decided) {
    const auto G = static_cast<int64_t>(canvas.size());
    const int64_t cap = r.spec.max_output_tokens;
    // Committed positions never change, and an end id inside the stable prefix decides the answer
    // below: while undecided, canvas[0, r.scanned) is the last iteration's stable prefix without an
    // end id, so both scans resume there (a whole-canvas rescan per slot and iteration was half of
    // the scheduler's time per step at 32 slots x 512 positions).
    int64_t stable = r.scanned;
    while (stable < G && canvas[static_cast<size_t>(stable)] != codec_.mask_id) ++stable;
    int64_t end = -1;
    for (int64_t i = r.scanned; i < stable && end < 0; ++i)
      if (std::find(codec_.end_ids.begin(), codec_.end_ids.end(), canvas[static_cast<size_t>(i)]) !=
          codec_.end_ids.end())
        end = i;
    r.scanned = stable;
    int64_t n = stable;
    if (end >= 0 && end <= cap) {  // an end id: the answer is the tokens before it
      n = end;
      r.decided = true;
    } else if (stable >= cap) {  // max_tokens reached
      n = cap;
      r.decided = true;
    } else if (denoiser_finished) {  // a finished canvas always decides; be safe
      r.decided = true;
    }
    const bool grew = n > r.answer_tokens;
    r.answer_tokens = std::max(r.answer_tokens, n);
    if ((grew || r.decided) && (r.spec.stream_text || !r.spec.stop.empty()) && codec_.decode) {
      if (codec_.text_stream) {  // only the new ids (the answer only grows until it is decided)
        if (!r.decoder) r.decoder.emplace(codec_.text_stream());
        r.decoder->append(
            canvas.subspan(static_cast<size_t>(r.decoded), static_cast<size_t>(r.answer_tokens - r.decoded)));
        r.decoded = r.answer_tokens;
        r.text = r.decoder->text();
      } else {
        r.text = codec_.decode(canvas.subspan(0, static_cast<size_t>(r.answer_tokens)));
      }
      // Stop strings: the answer ends before the earliest occurrence of any.
      size_t cut = std::string::npos;
      for (const std::string& s : r.spec.stop) cut = std::min(cut, r.text.find(s));
      if (cut != std::string::npos) {
        r.text.resize(cut);
        r.decided = true;
        // The tokens of the cut answer: the shortest prefix whose text covers it.
        int64_t lo = 0, hi = r.answer_tokens;
        while (lo < hi) {
          const int64_t mid = (lo + hi) / 2;
          if (codec_.decode(canvas.subspan(0, static_cast<size_t>(mid))).size() >= cut)
            hi = mid;
          else
            lo = mid + 1;
        }
        r.stop_tokens = lo;
        r.answer_tokens = lo;
      }
    }
  }
  ev.stable_tokens = r.answer_tokens;
  if (r.spec.stream_text) {
    const size_t upto = r.decided ? r.text.size() : stable_text_length(r.text, r.spec.stop);
    if (upto > r.sent) {
      ev.text_delta = r.text.substr(r.sent, upto - r.sent);
      r.sent = upto;
    }
  }
  return r.decided;
}

std::shared_ptr<GenerateResult> Scheduler::make_result(Request& r, Denoiser& den, int64_t slot) {
  SlotOutput o = den.output(slot);
  auto g = std::make_shared<GenerateResult>();
  g->prompt_ids = r.spec.prompt;
  g->canvas_ids = std::move(o.canvas);
  // The answer: up to the first end id, at most max_output_tokens, or up to a stop string.
  const int64_t limit = r.stop_tokens >= 0 ? r.stop_tokens : r.spec.max_output_tokens;
  for (int32_t id : g->canvas_ids) {
    if (std::find(codec_.end_ids.begin(), codec_.end_ids.end(), id) != codec_.end_ids.end()) {
      g->stopped_at_eos = r.stop_tokens < 0;
      break;
    }
    if (static_cast<int64_t>(g->output_ids.size()) >= limit) break;
    // Never [MASK] in an answer (the selection cannot propose it); the released output slice of
    // reference_quirks can hold undecoded positions and is returned as the released code does.
    FDLLM_CHECK(id != codec_.mask_id || codec_.allow_mask_in_output, ErrorCode::kInternal,
                "request {}: its answer holds the mask id at position {}", r.id, g->output_ids.size());
    g->output_ids.push_back(id);
  }
  if (codec_.decode) g->text = r.stop_tokens >= 0 ? r.text : codec_.decode(g->output_ids);
  if (r.spec.params.logprobs >= 0 && !r.logprobs.empty())
    g->logprobs.assign(r.logprobs.begin(), r.logprobs.begin() + static_cast<int64_t>(g->output_ids.size()));
  g->finish_reason = g->stopped_at_eos || r.stop_tokens >= 0 ? FinishReason::kStop : FinishReason::kLength;
  g->nfe = o.nfe;
  g->committed_tokens = o.committed;
  g->committed_tokens_reference = o.committed_reference;
  g->forward_passes = o.forward_passes;
  g->verify_candidates = o.verify_candidates;
  g->verify_accepted = o.verify_accepted;
  g->call_kinds = std::move(o.call_kinds);
  g->chat_template = r.spec.chat_template;
  g->latency_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.submitted).count();
  g->seconds = g->latency_seconds;
  return g;
}

}  // namespace flashdllm
