// The Python sandbox: passing and failing programs, code_eval semantics (SystemExit, stdin,
// disabled os functions), CPU-time / wall-clock / memory limits, no network, a clean environment,
// and the scratch directory being removed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "common/test_paths.h"
#include "eval/sandbox.h"
#include "flashdllm/status.h"

namespace flashdllm::eval {
namespace {

SandboxOptions quick(double timeout = 3.0) {
  SandboxOptions o;
  o.timeout_s = timeout;
  o.grace_s = 2.0;
  o.memory_bytes = 1ull << 30;
  o.scratch_root = test::temp_dir();
  return o;
}

TEST(Sandbox, PassesAndFails) {
  PythonSandbox sb(quick());
  EXPECT_FALSE(sb.python_version().empty());
  SandboxResult ok = sb.run("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\n");
  EXPECT_TRUE(ok.passed) << ok.result;
  EXPECT_EQ(ok.result, "passed");
  SandboxResult wrong = sb.run("def add(a, b):\n    return a * b\nassert add(2, 3) == 5\n");
  EXPECT_FALSE(wrong.passed);
  EXPECT_EQ(wrong.result.rfind("failed: AssertionError", 0), 0u) << wrong.result;
  SandboxResult syntax = sb.run("def f(:\n");
  EXPECT_FALSE(syntax.passed);
  EXPECT_EQ(syntax.result.rfind("failed: SyntaxError", 0), 0u) << syntax.result;
}

TEST(Sandbox, CodeEvalSemantics) {
  PythonSandbox sb(quick());
  // sys.exit / exit() before the asserts do not count as passing (code_eval catches BaseException).
  EXPECT_FALSE(sb.run("import sys\nsys.exit(0)\n").passed);
  EXPECT_FALSE(sb.run("exit(0)\n").passed);
  // os._exit kills the interpreter before the driver reports: failed, not passed.
  SandboxResult hard = sb.run("import os\nos._exit(0)\n");
  EXPECT_FALSE(hard.passed);
  EXPECT_EQ(hard.result.rfind("killed:", 0), 0u) << hard.result;
  // Output is swallowed, stdin is unreadable, globals are fresh (no __name__ == '__main__').
  EXPECT_TRUE(sb.run("print('x' * 100000)\n").passed);
  EXPECT_FALSE(sb.run("input()\n").passed);
  EXPECT_FALSE(sb.run("assert __name__ == '__main__'\n").passed);
  // Destructive functions are disabled like code_eval's reliability_guard.
  EXPECT_FALSE(sb.run("import os\nos.remove('program.py')\n").passed);
  EXPECT_FALSE(sb.run("import subprocess\nsubprocess.run(['true'])\n").passed);
  EXPECT_FALSE(sb.run("import os\nos.fork()\n").passed);
}

TEST(Sandbox, InfiniteLoopIsKilledAndFailed) {
  PythonSandbox sb(quick(1.0));
  const auto t0 = std::chrono::steady_clock::now();
  SandboxResult r = sb.run("while True:\n    pass\n");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.result, "timed out");
  EXPECT_LT(s, 1.0 + 2.0 + 3.0);  // timeout + grace, with slack for a loaded machine
  // A loop that swallows the timeout exception is killed at the wall-clock deadline.
  r = sb.run("while True:\n    try:\n        while True: pass\n    except BaseException:\n        pass\n");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.result, "timed out");
  // So is a program that ignores the alarm signal and sleeps.
  r = sb.run("import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(60)\n");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.result, "timed out");
}

TEST(Sandbox, UnboundedAllocationFails) {
  // Filling 1 GiB takes seconds on a loaded VM (page faults are slow there): the wall clock must not
  // end the program before the memory limit does.
  PythonSandbox sb(quick(30.0));
  SandboxResult r = sb.run("x = []\nwhile True:\n    x.append(bytearray(64 << 20))\n");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.result.find("MemoryError"), std::string::npos) << r.result;
  r = sb.run("x = bytearray(1 << 40)\n");
  EXPECT_FALSE(r.passed);
}

TEST(Sandbox, NetworkIsBlocked) {
  PythonSandbox sb(quick());
  const std::string isolation = sb.network_isolation();
  EXPECT_TRUE(isolation == "network namespace" || isolation == "python socket guard") << isolation;
  // Loopback included: in a fresh namespace it is down, and the guard refuses every socket.
  SandboxResult r = sb.run(
      "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\ns.settimeout(1)\n"
      "s.connect(('127.0.0.1', 9))\n");
  EXPECT_FALSE(r.passed) << r.result;
  r = sb.run("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\n");
  EXPECT_FALSE(r.passed) << r.result;
}

TEST(Sandbox, CleanEnvironmentAndScratchDirectory) {
  setenv("FLASHDLLM_SANDBOX_SECRET", "leak", 1);
  SandboxOptions o = quick();
  PythonSandbox sb(o);
  EXPECT_TRUE(sb.run("import os\nassert 'FLASHDLLM_SANDBOX_SECRET' not in os.environ\n"
                     "assert os.environ['PYTHONHASHSEED'] == '0'\n"
                     "assert hash('abc') == hash('abc')\n")
                  .passed);
  unsetenv("FLASHDLLM_SANDBOX_SECRET");
  // Files may be written in the scratch directory; it is gone afterwards.
  EXPECT_TRUE(sb.run("open('out.txt', 'w').write('hello')\nassert open('out.txt').read() == 'hello'\n").passed);
  size_t left = 0;
  for (const auto& e : std::filesystem::directory_iterator(o.scratch_root)) {
    (void)e;
    ++left;
  }
  EXPECT_EQ(left, 0u);
}

TEST(Sandbox, RunAllKeepsOrderAndReportsProgress) {
  SandboxOptions o = quick();
  o.jobs = 3;
  PythonSandbox sb(o);
  std::vector<std::string> programs;
  for (int i = 0; i < 8; ++i) programs.push_back(i % 2 ? "assert False\n" : "assert True\n");
  size_t last = 0;
  auto res = sb.run_all(programs, [&](size_t d) { last = std::max(last, d); });
  ASSERT_EQ(res.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(res[i].passed, i % 2 == 0) << i;
  EXPECT_EQ(last, 8u);
}

TEST(Sandbox, BadOptionsAreErrors) {
  SandboxOptions o = quick();
  o.python = "/nonexistent/python3";
  EXPECT_THROW(PythonSandbox{o}, Error);
  o = quick();
  o.timeout_s = 0;
  EXPECT_THROW(PythonSandbox{o}, Error);
}

}  // namespace
}  // namespace flashdllm::eval
