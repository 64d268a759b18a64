// Runs a command line in a child process with a wall-clock limit and reports its exit status,
// output, time and peak memory (the hardening tests: "exit 1 or 2, one message, < 5 s, no
// allocation beyond what the file justifies").
#pragma once

#include <cstdint>
#include <string>

namespace flashdllm::test {

struct CommandResult {
  int exit_code = -1;      // -1 when killed by a signal or the time limit
  int signal = 0;          // the terminating signal, 0 if it exited
  bool timed_out = false;  // killed (SIGKILL, with its process group) after the limit
  std::string output;      // stdout and stderr, interleaved
  double seconds = 0.0;
  int64_t max_rss_bytes = 0;  // peak resident set of the child (getrusage of the waited child)
};

/// Runs `command` with /bin/sh -c in its own process group; kills the group after `timeout_s`.
CommandResult run_command(const std::string& command, double timeout_s);

/// run_command("<build>/flashdllm " + args).
CommandResult run_flashdllm(const std::string& args, double timeout_s);

}  // namespace flashdllm::test
