// The scheduler; see scheduler.h for a request's life, the threads and the answer rules.
#include "engine/scheduler.h"

#include <algorithm>
#include <atomic>

#include "core/check.h"
#include "core/log.h"

namespace flashdllm {

const char* finish_reason_name(FinishReason r) noexcept {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;

const std::vector<double> kIterationBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 1e300};
const std::vector<double> kTokenBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 1e300};

void observe(const std::vector<double>& bounds, std::vector<int64_t>& counts, double& sum, double v) {
  if (counts.size() != bounds.size()) counts.assign(bounds.size(), 0);
  for (size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) {
      ++counts[i];
      break;
    }
  sum += v;
}

/// Summary of the newest iteration wall times `seconds` (any order) of a kind whose totals are in `all`.
EngineMetrics::IterationTimes summarize(const std::deque<double>& seconds, const EngineMetrics::IterationTimes& all) {
  EngineMetrics::IterationTimes t;
  t.count = all.count;
  t.sum = all.sum;
  if (seconds.empty()) return t;
  std::vector<double> v(seconds.begin(), seconds.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  // Quantile q: linear interpolation between the closest ranks (numpy's default).
  auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(n - 1);
    const auto lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, n - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  double sum = 0.0;
  for (double x : v) sum += x;
  t.mean = sum / static_cast<double>(n);
  t.median = quantile(0.5);
  t.p10 = quantile(0.1);
  t.p90 = quantile(0.9);
  t.min = v.front();
  t.max = v.back();
  return t;
}

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

// ---------------------------------------------------------------------------------- the stream

class Scheduler::Stream final : public RequestStream {
 public:
  explicit Stream(uint64_t id) : id_(id) {}
  uint64_t id() const noexcept override { return id_; }

  std::optional<RequestEvent> next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lk(mu_);
    const auto ready = [&] { return !events_.empty() || final_taken_; };
    // A zero timeout only looks. A timed wait that is already due still sleeps for the kernel's timer
    // slack (about 70 us per call on this Linux, 50 us slack), which generate's drain loop paid once
    // per stream per iteration: 2.4 ms per iteration at 32 slots (bench/results/2026-12-04-h200-gpu-gaps/).
    if (timeout.count() <= 0 ? !ready() : !cv_.wait_for(lk, timeout, ready)) return std::nullopt;
    if (events_.empty()) return std::nullopt;  // the final event was taken earlier
    RequestEvent ev = std::move(events_.front());
    events_.pop_front();
    if (ev.finished) final_taken_ = true;
    return ev;
  }
  void cancel() noexcept override { cancel_.store(true); }
  bool finished() const noexcept override {
    std::lock_guard<std::mutex> lk(mu_);
    return final_taken_;
  }

  bool cancel_requested() const noexcept { return cancel_.load(); }
  void push(RequestEvent ev) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      events_.push_back(std::move(ev));
    }
    cv_.notify_all();
  }

 private:
  const uint64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  bool final_taken_ = false;
  std::atomic<bool> cancel_{false};
};

struct Scheduler::Request {
  uint64_t id = 0;
  ScheduledRequest spec;
  std::shared_ptr<Stream> stream;
  Clock::time_point submitted;
  int64_t iterations = 0;
  // The answer (see update_answer).
  bool decided = false;        // the answer cannot change any more
  int64_t answer_tokens = 0;    // stable answer tokens so far
  int64_t scanned = 0;          // canvas[0, scanned) holds no mask and no end id (update_answer resumes there)
  int64_t stop_tokens = -1;     // a stop string ended the answer: tokens before it; -1 = none
  std::string text;             // the stable answer's text (stop strings cut)
  std::optional<TextStream> decoder;  // codec.text_stream: the answer's ids decoded so far
  int64_t decoded = 0;                // ids appended to `decoder`
  size_t sent = 0;              // bytes of `text` delivered as deltas
  // params.logprobs >= 0: each canvas position's TokenLogprob once committed, and the answer
  // tokens whose logprobs went out with events.
  std::vector<TokenLogprob> logprobs;
  int64_t logprobs_sent = 0;
};

// ---------------------------------------------------------------------------------- scheduler

Scheduler::Scheduler(Denoiser& denoiser, TextCodec codec, Options options)
    : Scheduler(std::vector<Denoiser*>{&denoiser}, std::move(codec), std::move(options)) {}

Scheduler::Scheduler(std::vector<Denoiser*> replicas, TextCodec codec, Options options)
    : codec_(std::move(codec)), opt_(std::move(options)) {
  FDLLM_CHECK_ARG(!replicas.empty(), "the scheduler needs at least one denoiser");
  reps_.resize(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i) {
    FDLLM_CHECK_ARG(replicas[i] != nullptr, "the scheduler's replica {} has no denoiser", i);
    reps_[i].den = replicas[i];
    reps_[i].running.resize(static_cast<size_t>(replicas[i]->n_slots()));
    metrics_.n_slots += replicas[i]->n_slots();
  }
  metrics_.replicas = static_cast<int64_t>(reps_.size());
  metrics_.replica_iterations.assign(reps_.size(), 0);
  metrics_.iteration_seconds_bounds = kIterationBounds;
  metrics_.iteration_seconds_counts.assign(kIterationBounds.size(), 0);
  metrics_.tokens_per_iteration_bounds = kTokenBounds;
  metrics_.tokens_per_iteration_counts.assign(kTokenBounds.size(), 0);
}

Scheduler::~Scheduler() = default;

void Scheduler::distribute_locked() {
  while (!queue_.empty()) {
    Replica* best = nullptr;
    int64_t best_load = 0;
    for (Replica& rep : reps_) {
      const int64_t load = rep.busy + static_cast<int64_t>(rep.assigned.size());
      if (load >= rep.den->n_slots() || (best != nullptr && load >= best_load)) continue;
      best = &rep;
      best_load = load;
    }
    if (best == nullptr) return;  // every slot is taken or promised
    best->assigned.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
}

std::shared_ptr<RequestStream> Scheduler::submit(ScheduledRequest request) {
  FDLLM_CHECK_ARG(request.max_output_tokens >= 1 && request.max_output_tokens <= request.params.gen_length,
                  "max_output_tokens {} must be in [1, gen_length = {}]", request.max_output_tokens,
                  request.params.gen_length);
  FDLLM_CHECK_ARG(request.stop.empty() || codec_.decode, "stop strings need a tokenizer (the checkpoint has none)");
  reps_[0].den->check_request(request.prompt, request.params);  // const and thread-safe: the pool's limits only
  auto r = std::make_shared<Request>();
  r->spec = std::move(request);
  r->submitted = Clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    FDLLM_CHECK(!closed_, ErrorCode::kUnavailable, "the engine is shutting down and takes no new requests");
    queue_.push_back(r);
    distribute_locked();
    if (static_cast<int64_t>(queue_.size()) > opt_.max_queue) {
      queue_.pop_back();  // it is `r`: distribute takes from the front and took nothing more
      throw Error(ErrorCode::kUnavailable,
                  fmt::format("the request queue is full: all {} slots are taken and {} requests wait for one "
                              "(max_queue {})",
                              metrics_.n_slots, queue_.size(), opt_.max_queue));
    }
    r->id = next_id_++;
    r->stream = std::make_shared<Stream>(r->id);
    live_[r->id] = r->stream;
  }
  work_cv_.notify_all();
  return r->stream;
}

bool Scheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  auto s = it->second.lock();
  if (!s) return false;
  s->cancel();
  return true;
}

void Scheduler::close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
  }
  work_cv_.notify_all();
}

void Scheduler::cancel_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [id, w] : live_)
    if (auto s = w.lock()) s->cancel();
}

bool Scheduler::has_work() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!queue_.empty() || busy_ > 0) return true;
  return std::any_of(reps_.begin(), reps_.end(), [](const Replica& rep) { return !rep.assigned.empty(); });
}

bool Scheduler::has_work(size_t replica) const {
  FDLLM_ASSERT_MSG(replica < reps_.size(), "replica {} of {}", replica, reps_.size());
  std::lock_guard<std::mutex> lk(mu_);
  const Replica& rep = reps_[replica];
  return !queue_.empty() || !rep.assigned.empty() || rep.busy > 0;
}

void Scheduler::wait_for_work(std::chrono::milliseconds timeout, size_t replica) {
  FDLLM_ASSERT_MSG(replica < reps_.size(), "replica {} of {}", replica, reps_.size());
  std::unique_lock<std::mutex> lk(mu_);
  const Replica& rep = reps_[replica];
  // The shared queue counts only when this replica could take from it (otherwise another
  // replica's step gives it away): a replica with every slot busy waits here for its own work.
  work_cv_.wait_for(lk, timeout, [&] {
    return !rep.assigned.empty() || rep.busy > 0 || closed_ ||
           (!queue_.empty() && rep.busy + static_cast<int64_t>(rep.assigned.size()) < rep.den->n_slots());
  });
}

EngineMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineMetrics m = metrics_;
  m.queue_depth = static_cast<int64_t>(queue_.size());
  for (const Replica& rep : reps_) m.queue_depth += static_cast<int64_t>(rep.assigned.size());
  m.slots_busy = busy_;
  for (const Replica& rep : reps_) m.replica_slots_busy.push_back(rep.busy);
  m.decode_iterations = summarize(decode_seconds_, metrics_.decode_iterations);
  m.admission_iterations = summarize(admission_seconds_, metrics_.admission_iterations);
  m.decode_iterations.host_phases = metrics_.decode_iterations.host_phases;
  m.admission_iterations.host_phases = metrics_.admission_iterations.host_phases;
  if (!recent_.empty()) {
    const auto now = Clock::now();
    int64_t tokens = 0;
    for (const auto& [t, n] : recent_)
      if (now - t <= std::chrono::seconds(10)) tokens += n;
    m.tokens_per_second = static_cast<double>(tokens) / 10.0;
  }
  return m;
}

void Scheduler::fail(Request& r, RequestEvent ev, const Error& e) {
  ev.error = e.code() == ErrorCode::kInvalidCheckpoint && !opt_.checkpoint.empty()
                 ? fmt::format("checkpoint '{}': {}", opt_.checkpoint, e.what())
                 : std::string(e.what());
  ev.error_code = e.code();
  ev.result.reset();
  finish(r, FinishReason::kError, std::move(ev));
}

void Scheduler::finish(Request& r, FinishReason reason, RequestEvent ev) {
  ev.finished = true;
  ev.finish_reason = reason;
  {
    std::lock_guard<std::mutex> lk(mu_);
    live_.erase(r.id);
    switch (reason) {
      case FinishReason::kStop: ++metrics_.requests_finished_stop; break;
      case FinishReason::kLength: ++metrics_.requests_finished_length; break;
      case FinishReason::kCancelled: ++metrics_.requests_cancelled; break;
      case FinishReason::kError: ++metrics_.requests_failed; break;
    }
    if (ev.result) metrics_.generated_tokens += ev.result->generated_tokens();
  }
  r.stream->push(std::move(ev));
}

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
  g->latency_seconds = std::chrono::duration<double>(Clock::now() - r.submitted).count();
  g->seconds = g->latency_seconds;
  return g;
}

std::shared_ptr<Scheduler::Request> Scheduler::release_slot(Replica& rep, size_t slot) {
  rep.den->release(static_cast<int64_t>(slot));
  std::shared_ptr<Request> r = std::move(rep.running[slot]);
  std::lock_guard<std::mutex> lk(mu_);
  --rep.busy;
  --busy_;
  return r;
}

bool Scheduler::admit_and_cancel(Replica& rep, std::vector<size_t>& admitted) {
  Denoiser& den = *rep.den;
  auto& running = rep.running;
  bool did = false;
  for (size_t j = 0; j < running.size(); ++j) {
    if (!running[j] || !running[j]->stream->cancel_requested()) continue;
    const auto r = release_slot(rep, j);
    RequestEvent ev;
    ev.iteration = r->iterations;
    finish(*r, FinishReason::kCancelled, std::move(ev));
    did = true;
  }
  std::vector<std::shared_ptr<Request>> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto drop_cancelled = [&](std::deque<std::shared_ptr<Request>>& q) {
      for (auto it = q.begin(); it != q.end();) {
        if ((*it)->stream->cancel_requested()) {
          dropped.push_back(*it);
          it = q.erase(it);
        } else {
          ++it;
        }
      }
    };
    drop_cancelled(queue_);
    drop_cancelled(rep.assigned);
    distribute_locked();
    for (size_t j = 0; j < running.size() && !rep.assigned.empty(); ++j) {
      if (running[j] || den.active(static_cast<int64_t>(j))) continue;
      running[j] = std::move(rep.assigned.front());
      rep.assigned.pop_front();
      admitted.push_back(j);
      ++rep.busy;
      ++busy_;
    }
  }
  if (!admitted.empty()) work_cv_.notify_all();  // distribute may have given work to another replica
  did = did || !dropped.empty();
  for (auto& r : dropped) finish(*r, FinishReason::kCancelled, RequestEvent{});
  for (size_t j : admitted) {
    try {
      den.admit(static_cast<int64_t>(j), running[j]->spec.prompt, running[j]->spec.params);
    } catch (const Error& e) {
      fail(*release_slot(rep, j), RequestEvent{}, e);
      did = true;
    }
  }
  return did;
}

void Scheduler::fail_running(Replica& rep, const Error& e) {
  logger().error("iteration failed ({}): {}", opt_.checkpoint, e.what());
  for (size_t j = 0; j < rep.running.size(); ++j) {
    if (!rep.running[j]) continue;
    const auto r = release_slot(rep, j);
    RequestEvent ev;
    ev.iteration = r->iterations;
    fail(*r, std::move(ev), e);
  }
}

int64_t Scheduler::deliver(Replica& rep, std::vector<SlotStep>& steps) {
  Denoiser& den = *rep.den;
  int64_t committed = 0;
  for (SlotStep& st : steps) {
    const auto slot = static_cast<size_t>(st.slot);
    auto& r = rep.running[slot];
    FDLLM_ASSERT_MSG(r != nullptr, "the denoiser stepped slot {}, which holds no request", st.slot);
    ++r->iterations;
    committed += static_cast<int64_t>(st.positions.size());
    if (!st.error.empty()) {  // this request's logits were not finite: it fails, the others go on
      logger().warn("a request failed alone ({}): {}", opt_.checkpoint, st.error);
      RequestEvent ev;
      ev.iteration = r->iterations;
      const auto req = release_slot(rep, slot);
      fail(*req, std::move(ev), Error(ErrorCode::kInvalidCheckpoint, st.error));
      continue;
    }
    const std::span<const int32_t> canvas = den.canvas(st.slot);
    RequestEvent ev;
    ev.iteration = r->iterations;
    ev.canvas_length = r->spec.params.gen_length;
    if (r->spec.params.logprobs >= 0) {
      if (r->logprobs.size() < canvas.size()) r->logprobs.resize(canvas.size());
      FDLLM_ASSERT_MSG(st.logprobs.size() == st.positions.size(), "slot {}: {} logprobs for {} committed positions",
                       st.slot, st.logprobs.size(), st.positions.size());
      for (size_t k = 0; k < st.positions.size(); ++k)
        r->logprobs[static_cast<size_t>(st.positions[k])] = std::move(st.logprobs[k]);
    }
    ev.positions = std::move(st.positions);
    ev.tokens = std::move(st.tokens);
    const bool decided = update_answer(*r, canvas, st.finished, ev);
    // With stop strings the answer's end is not known until it is decided (a stop string can cut
    // tokens already stable): their logprobs wait for that, so none past the cut is ever sent.
    const bool lp_ready = r->spec.stop.empty() || decided || st.finished;
    if (r->spec.params.logprobs >= 0 && lp_ready && r->answer_tokens > r->logprobs_sent) {
      ev.logprobs.assign(r->logprobs.begin() + r->logprobs_sent, r->logprobs.begin() + r->answer_tokens);
      r->logprobs_sent = r->answer_tokens;
    }
    const bool done = st.finished || (r->spec.finish_early && decided);
    if (opt_.hook) {
      std::lock_guard<std::mutex> hk(hook_mu_);
      opt_.hook(r->spec.tag, canvas, done);
    }
    if (!done) {
      r->stream->push(std::move(ev));
      continue;
    }
    std::optional<Error> error;
    try {
      ev.result = make_result(*r, den, st.slot);
    } catch (const Error& e) {
      error = e;
    }
    const auto req = release_slot(rep, slot);  // before the final event (see release_slot)
    if (error) {
      fail(*req, std::move(ev), *error);
    } else {
      const FinishReason reason = ev.result->finish_reason;  // read before ev is moved
      finish(*req, reason, std::move(ev));
    }
  }
  return committed;
}

void Scheduler::record_iteration(Replica& rep, size_t replica, bool admission, int64_t committed, int64_t passes,
                                 Clock::time_point entered, Clock::time_point t0, Clock::time_point t1) {
  std::vector<StepPhase> phases = rep.den->step_phases();
  std::lock_guard<std::mutex> lk(mu_);
  const double dt = std::chrono::duration<double>(t1 - t0).count();
  ++metrics_.iterations;
  ++metrics_.replica_iterations[replica];
  metrics_.forward_passes += passes;
  metrics_.committed_tokens += committed;
  metrics_.busy_seconds += dt;
  observe(kIterationBounds, metrics_.iteration_seconds_counts, metrics_.iteration_seconds_sum, dt);
  std::deque<double>& newest = admission ? admission_seconds_ : decode_seconds_;
  EngineMetrics::IterationTimes& all = admission ? metrics_.admission_iterations : metrics_.decode_iterations;
  ++all.count;
  all.sum += dt;
  // This step's host phases: the scheduler's own time, then what the denoiser's totals grew by
  // (summed by name over replicas, in the order first seen).
  auto add_phase = [&all](const char* name, double seconds) {
    auto it = std::find_if(all.host_phases.begin(), all.host_phases.end(),
                           [&](const EngineMetrics::HostPhase& h) { return h.name == name; });
    if (it == all.host_phases.end()) it = all.host_phases.insert(all.host_phases.end(), {name, 0.0});
    it->seconds += seconds;
  };
  add_phase("scheduler", std::chrono::duration<double>(Clock::now() - entered).count() - dt);
  for (size_t i = 0; i < phases.size(); ++i)
    add_phase(phases[i].name, phases[i].seconds - (i < rep.phases.size() ? rep.phases[i].seconds : 0.0));
  rep.phases = std::move(phases);
  newest.push_back(dt);
  if (static_cast<int64_t>(newest.size()) > EngineMetrics::kIterationWindow) newest.pop_front();
  observe(kTokenBounds, metrics_.tokens_per_iteration_counts, metrics_.tokens_per_iteration_sum,
          static_cast<double>(committed));
  recent_.emplace_back(t1, committed);
  while (!recent_.empty() && t1 - recent_.front().first > std::chrono::seconds(10)) recent_.pop_front();
}

bool Scheduler::step(size_t replica) {
  FDLLM_ASSERT_MSG(replica < reps_.size(), "replica {} of {}", replica, reps_.size());
  const auto entered = Clock::now();
  Replica& rep = reps_[replica];
  // 1. Cancellations and admissions: a slot freed now is refilled before this iteration.
  std::vector<size_t> admitted;
  const bool did = admit_and_cancel(rep, admitted);
  if (std::none_of(rep.running.begin(), rep.running.end(), [](const auto& r) { return r != nullptr; })) return did;

  // 2. One iteration of every running request of this replica.
  const auto t0 = Clock::now();
  std::vector<SlotStep> steps;
  const int64_t passes0 = rep.den->model_passes();
  try {
    steps = rep.den->step();
  } catch (const Error& e) {
    fail_running(rep, e);
    return true;
  }
  const auto t1 = Clock::now();
  const int64_t passes = rep.den->model_passes() - passes0;

  // 3. Events, answers, finishing; 4. metrics.
  const int64_t committed = deliver(rep, steps);
  record_iteration(rep, replica, !admitted.empty(), committed, passes, entered, t0, t1);
  return true;
}

}  // namespace flashdllm
