// The scheduler; see scheduler.h for a request's life, the threads and the answer rules. Here: the
// queue, the replicas' slots, the steps and the metrics; each request's answer and result are in
// scheduler_answer.cpp, its stream and record in scheduler_request.h.
#include "engine/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "engine/scheduler_request.h"

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

}  // namespace

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
