// Sandbox for generated Python (HumanEval / MBPP pass@1): one child process per program.
//
// What a run gets (fork/exec, no shell):
//  * a fresh scratch directory (mkdtemp under `scratch_root`), its working directory, removed after;
//  * a clean environment (PATH=/usr/bin:/bin, HOME=TMPDIR=scratch, LANG=C.UTF-8, PYTHONHASHSEED=0,
//    OMP_NUM_THREADS=1, ...), stdin from /dev/null, stdout/stderr to files in the scratch directory;
//    interpreter flags -s -B (no user site-packages, no bytecode files);
//  * resource limits: RLIMIT_CPU (timeout + grace, rounded up), RLIMIT_AS (address space),
//    RLIMIT_FSIZE (bytes written per file), RLIMIT_NOFILE, RLIMIT_CORE = 0. RLIMIT_NPROC is NOT set: it
//    counts every process of the user on the host, so a limit would make results depend on the
//    host's state; forking is disabled inside Python instead (below) and the whole process group is
//    killed when the program ends;
//  * its own process group, SIGKILLed on the wall-clock deadline (timeout + grace) and after exit;
//  * no network: a new network namespace (unshare(CLONE_NEWNET), or CLONE_NEWUSER|CLONE_NEWNET with
//    an identity uid/gid map for unprivileged users), probed once; where the kernel or container
//    refuses namespaces the Python driver replaces socket creation/resolution by functions that
//    raise OSError (network_isolation() tells which is in force).
// Inside, a small driver reproduces HF `evaluate`'s code_eval `unsafe_execute` semantics (what
// lm-eval 0.4.8 uses): the program is exec()'d with an empty globals dict under a 3 s (default)
// ITIMER_REAL limit, stdout/stderr swallowed, stdin unreadable, destructive os/shutil/subprocess
// functions and builtins exit/quit disabled first (like code_eval's reliability_guard); the result is
// "passed", "failed: <exception>" or "timed out". A program that kills the interpreter (os._exit,
// a signal, a resource limit) leaves no result and counts as failed.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace flashdllm::eval {

struct SandboxOptions {
  std::string python = "python3";  ///< interpreter: a path, or a name looked up in PATH once
  double timeout_s = 3.0;          ///< exec() time limit (code_eval's default timeout)
  double grace_s = 2.0;            ///< extra wall time for interpreter start-up before the hard kill
  uint64_t memory_bytes = 4ull << 30;  ///< RLIMIT_AS of the child
  uint64_t file_bytes = 16ull << 20;   ///< RLIMIT_FSIZE of the child
  std::filesystem::path scratch_root;  ///< where scratch directories go (default: the system temp dir)
  int jobs = 0;                        ///< parallel programs in run_all (0 = hardware threads)
};

struct SandboxResult {
  bool passed = false;
  /// "passed" | "failed: <exception>" | "timed out" | "killed: <why>" | "error: <sandbox failure>"
  std::string result;
  double seconds = 0.0;  ///< wall time of the child
  int exit_status = 0;   ///< exit code, or -signal when killed by a signal
};

class PythonSandbox {
 public:
  /// Resolves the interpreter (Error(kInvalidArgument) when it cannot be found or run) and probes
  /// which network isolation the kernel allows.
  explicit PythonSandbox(SandboxOptions options = {});

  /// Runs one program. Never throws for anything the program does; sandbox failures (no scratch
  /// directory, fork failure) come back as result "error: ..." with passed = false.
  SandboxResult run(const std::string& program) const;

  /// Runs programs in parallel (options.jobs at a time); results in input order. `progress`
  /// (optional) is called from worker threads with the number finished so far.
  std::vector<SandboxResult> run_all(const std::vector<std::string>& programs,
                                     const std::function<void(size_t)>& progress = {}) const;

  /// "network namespace" or "python socket guard".
  std::string network_isolation() const;
  /// `sys.version` of the interpreter, e.g. "3.11.7".
  const std::string& python_version() const noexcept { return python_version_; }
  const SandboxOptions& options() const noexcept { return opt_; }

 private:
  enum class NetMode { kNetns, kUserNetns, kGuard };
  SandboxOptions opt_;
  std::string python_path_;
  std::string python_version_;
  NetMode net_ = NetMode::kGuard;
};

}  // namespace flashdllm::eval
