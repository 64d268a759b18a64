// `flashdllm serve` (serve.h).
#include "serve.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/check.h"
#include "model/model_config.h"
#include "server/server.h"

namespace flashdllm::cli {

void add_serve_subcommand(CLI::App& app, CommonArgs& ca, ServeArgs& sa, CLI::App*& cmd) {
  cmd = app.add_subcommand("serve", "OpenAI-compatible server: /v1/completions, /v1/chat/completions, /v1/models, "
                                    "/health, /metrics and the live-denoising page at / (docs/serving.md)");
  add_common(cmd, ca);
  cmd->add_option("--host", sa.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", sa.port, "port (0 = any free port; the startup line says which)")
      ->check(int_in_range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--served-model-name", sa.served_model_name,
                  "the model id clients send (default: the model directory's name)");
  cmd->add_option("--max-model-len", sa.max_model_len,
                  "longest prompt + max_tokens a request may have; sizes the K/V slots (0 = max_sequence_length)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  cmd->add_option("--max-queue", sa.max_queue, "requests waiting for a slot before 429 (queue full)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  cmd->add_option("--default-max-tokens", sa.default_max_tokens, "max_tokens of requests that give none")
      ->check(int_in_range(1, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--max-body-mb", sa.max_body_mb, "larger request bodies get 413")
      ->check(int_in_range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-buffered-body-mb", sa.max_buffered_body_mb,
                  "MiB of request bodies read or served at once (the memory they take): a body past it gets 503; "
                  "at least --max-body-mb")
      ->check(int_in_range(1, 1 << 20))
      ->capture_default_str();
  // The HTTP layer's deadlines, in seconds (1 s to an hour).
  const std::pair<const char*, int*> timeouts[] = {{"--read-timeout", &sa.read_timeout_s},
                                                   {"--write-timeout", &sa.write_timeout_s},
                                                   {"--keep-alive-timeout", &sa.keep_alive_timeout_s}};
  const char* timeout_help[] = {
      "seconds a request's headers may take from their first byte, and a body may go without a byte (it must also "
      "average 16 KiB/s after them): 408 past them",
      "seconds a response may wait in all for its client to read (a client that stops reading is dropped after it)",
      "seconds an idle connection is kept open"};
  for (size_t i = 0; i < 3; ++i)
    cmd->add_option(timeouts[i].first, *timeouts[i].second, timeout_help[i])
        ->check(int_in_range(1, 3600))
        ->capture_default_str();
  cmd->add_option("--max-connections", sa.max_connections,
                  "open connections (idle and slow ones included; they hold no thread): past it a new one gets 503. "
                  "The open-file limit is raised to fit it where the hard limit allows")
      ->check(int_in_range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--http-threads", sa.http_threads,
                  "request workers: requests processed at once (0 = max(256, slots + max-queue + 32); at most 4096)")
      ->check(int_in_range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--allowed-host", sa.allowed_hosts,
                  "a Host name the server answers to beside IP addresses, localhost and --host (repeatable; * = "
                  "any): other names get 421, against DNS rebinding");
  cmd->add_option("--cors-origin", sa.cors_origins,
                  "a web origin (https://app.example) whose pages may call the API: CORS headers for it (repeatable; "
                  "* = any). Requests from other origins get 403");
  cmd->add_option("--api-key", sa.api_key,
                  "the /v1/ routes need 'Authorization: Bearer KEY' (the openai client's api_key)");
  sa.dec.serving = true;
  add_decode_options(cmd, sa.dec);
}

int run_serve(const CommonArgs& ca, ServeArgs& sa) {
  GenerateOptions go = sa.dec.options();
  FDLLM_CHECK_ARG(sa.max_buffered_body_mb >= sa.max_body_mb,
                  "--max-buffered-body-mb {} must be at least --max-body-mb {} (a largest body must fit)",
                  sa.max_buffered_body_mb, sa.max_body_mb);
  // SIGINT / SIGTERM go to a watcher thread (blocked everywhere else, before any thread exists).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that went away must not end the server

  auto engine = load_engine(ca);
  sa.dec.fit_to_model(go, engine->config());
  ServeOptions so;
  so.decode = go.decode;
  so.max_model_len = sa.max_model_len;
  so.max_queue = sa.max_queue;
  engine->start(so);
  // A default max_tokens that leaves no room for a prompt refuses every request without max_tokens:
  // an error when asked for, a warning when it is the default.
  if (const int64_t len = engine->serve_options().max_model_len; sa.default_max_tokens >= len) {
    if (sa.dec.given("--default-max-tokens"))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--default-max-tokens {} leaves no room for a prompt in max_model_len {}: lower it",
                              sa.default_max_tokens, len));
    std::fprintf(stderr,
                 "[flashdllm] warning: max_model_len %lld leaves no room for a prompt beside the default max_tokens "
                 "%lld: requests must give max_tokens (or pass --default-max-tokens)\n",
                 static_cast<long long>(len), static_cast<long long>(sa.default_max_tokens));
  }
  server::ServerOptions o;
  o.host = sa.host;
  o.port = sa.port;
  o.model_id = sa.served_model_name;
  o.default_max_tokens = sa.default_max_tokens;
  o.max_body_bytes = static_cast<size_t>(sa.max_body_mb) << 20;
  o.max_buffered_body_bytes = static_cast<size_t>(sa.max_buffered_body_mb) << 20;
  o.read_timeout_s = sa.read_timeout_s;
  o.write_timeout_s = sa.write_timeout_s;
  o.keep_alive_timeout_s = sa.keep_alive_timeout_s;
  o.max_connections = static_cast<size_t>(sa.max_connections);
  o.max_threads = sa.http_threads;
  o.allowed_hosts = sa.allowed_hosts;
  o.cors_origins = sa.cors_origins;
  o.api_key = sa.api_key;
  server::Server srv(*engine, o);
  const int port = srv.bind();
  const ServeOptions& s = engine->serve_options();
  std::fprintf(stderr, "[flashdllm] serving '%s' on http://%s:%d (%s, %lld slots, max_model_len %lld, queue %lld; %s)\n",
               srv.model_id().c_str(), sa.host.c_str(), port, cache_mode_name(s.decode.cache),
               static_cast<long long>(engine->total_slots()), static_cast<long long>(s.max_model_len),
               static_cast<long long>(s.max_queue), engine->backend_name().c_str());
  std::fflush(stderr);

  std::atomic<bool> done{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (!done) {
      std::fprintf(stderr, "[flashdllm] %s: draining in-flight requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      std::fflush(stderr);
      srv.stop();
    }
  });
  const bool ok = srv.run();
  srv.stop();  // after a listener failure too
  done = true;
  pthread_kill(watcher.native_handle(), SIGTERM);  // ends the watcher's sigwait (SIGTERM is blocked elsewhere)
  watcher.join();
  const EngineMetrics m = engine->metrics();
  const long long finished = static_cast<long long>(m.requests_finished_stop + m.requests_finished_length);
  std::fprintf(stderr, "[flashdllm] stopped: %lld request%s finished, %lld cancelled, %lld failed\n", finished,
               finished == 1 ? "" : "s", static_cast<long long>(m.requests_cancelled),
               static_cast<long long>(m.requests_failed));
  return ok ? 0 : 1;
}

}  // namespace flashdllm::cli
