#include "eval/sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/check.h"

namespace flashdllm::eval {

namespace {

namespace fs = std::filesystem;

// Runs inside the child interpreter: `python3 -s -B -c DRIVER <timeout_s> <netns|guard>` in the
// scratch directory holding program.py. Semantics of HF evaluate's code_eval `unsafe_execute`
// (exec with empty globals, swallowed IO, ITIMER_REAL limit, reliability guard); see sandbox.h.
constexpr const char* kDriver = R"PY(
import sys, os, io, signal

def _flashdllm_sandbox():
    timeout = float(sys.argv[1])
    out = open("result", "w", encoding="utf-8")
    with open("program.py", encoding="utf-8", errors="replace") as f:
        src = f.read()
    hard_exit = os._exit
    if sys.argv[2] == "guard":
        import socket, _socket
        def no_network(*args, **kwargs):
            raise OSError("network access is disabled in the flashdllm sandbox")
        class NoSocket(socket.socket):
            def __init__(self, *args, **kwargs):
                no_network()
        socket.socket = NoSocket
        _socket.socket = NoSocket
        for name in ("create_connection", "create_server", "getaddrinfo", "gethostbyname",
                     "gethostbyname_ex", "gethostbyaddr", "socketpair", "fromfd"):
            setattr(socket, name, no_network)
    class Timeout(Exception):
        pass
    def on_alarm(signum, frame):
        raise Timeout()
    class NoInput(io.StringIO):
        def read(self, *args, **kwargs):
            raise OSError("stdin is not readable in the sandbox")
        readline = read
        readlines = read
        def readable(self):
            return False
    import builtins, faulthandler, shutil, subprocess
    faulthandler.disable()
    for name in ("kill", "killpg", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir",
                 "setuid", "fork", "forkpty", "rename", "renames", "truncate", "replace", "unlink",
                 "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown",
                 "getcwd", "chdir"):
        if hasattr(os, name):
            setattr(os, name, None)
    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    subprocess.Popen = None
    builtins.exit = None
    builtins.quit = None
    builtins.help = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None
    sink = io.StringIO()
    try:
        code = compile(src, "program.py", "exec")
        sys.stdout, sys.stderr, sys.stdin = sink, sink, NoInput()
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(code, {})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        status = "passed"
    except Timeout:
        status = "timed out"
    except BaseException as e:
        try:
            status = "failed: " + type(e).__name__ + ": " + str(e)
        except BaseException:
            status = "failed: " + type(e).__name__
    out.write(status[:2000])
    out.flush()
    hard_exit(0)

_flashdllm_sandbox()
)PY";

constexpr int kNamespaceFailure = 121;  // child exit code: the namespace could not be entered
constexpr int kExecFailure = 127;

std::string resolve_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (dir.empty()) continue;
    const std::string cand = dir + "/" + name;
    if (access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

/// Writes `text` to an already-chosen /proc file from the child (async-signal-safe).
bool write_proc(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t len = static_cast<ssize_t>(strlen(text));
  const bool ok = write(fd, text, static_cast<size_t>(len)) == len;
  close(fd);
  return ok;
}

struct UserMaps {
  char uid_map[64];
  char gid_map[64];
};

UserMaps make_user_maps() {
  UserMaps m{};
  std::snprintf(m.uid_map, sizeof m.uid_map, "%u %u 1\n", static_cast<unsigned>(getuid()), static_cast<unsigned>(getuid()));
  std::snprintf(m.gid_map, sizeof m.gid_map, "%u %u 1\n", static_cast<unsigned>(getgid()), static_cast<unsigned>(getgid()));
  return m;
}

/// In the child: enters a network namespace (and a user namespace when `user`). Async-signal-safe.
bool enter_netns(bool user, const UserMaps& maps) {
  if (!user) return unshare(CLONE_NEWNET) == 0;
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return false;
  write_proc("/proc/self/setgroups", "deny");  // absent on old kernels: then gid_map may still work
  return write_proc("/proc/self/uid_map", maps.uid_map) && write_proc("/proc/self/gid_map", maps.gid_map);
}

int probe_netns(bool user) {
  const UserMaps maps = make_user_maps();
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(enter_netns(user, maps) ? 0 : 1);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string read_file(const fs::path& p, size_t max_bytes) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return "";
  std::string s(max_bytes, '\0');
  in.read(s.data(), static_cast<std::streamsize>(max_bytes));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

rlim_t seconds_limit(double s) { return static_cast<rlim_t>(std::ceil(std::max(1.0, s))); }

/// Waits for child `pid` (polling with backoff up to 20 ms) and sets its wait status st; at the
/// deadline kills its process group and returns true (timed out).
bool wait_until(pid_t pid, std::chrono::time_point<std::chrono::steady_clock, std::chrono::duration<double>> deadline,
                int& st) {
  auto sleep = std::chrono::microseconds(500);
  while (true) {
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return false;
    if (r < 0 && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      return true;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
}

/// res.result (and res.passed) of a finished child with wait status st and res.exit_status set:
/// the driver's verdict in dir/result if any, else why the child died (last stderr line).
void describe_outcome(SandboxResult& res, int st, bool timed_out, const fs::path& dir) {
  const std::string status = read_file(dir / "result", 4096);
  if (timed_out) {
    res.result = "timed out";
  } else if (!status.empty()) {
    res.result = status;
    res.passed = status == "passed" && res.exit_status == 0;
  } else if (res.exit_status == kNamespaceFailure) {
    res.result = "error: could not enter a network namespace";
  } else if (WIFSIGNALED(st)) {
    res.result = fmt::format("killed: signal {} ({})", WTERMSIG(st), strsignal(WTERMSIG(st)));
  } else {
    std::string err = read_file(dir / "stderr", 4096);
    const size_t nl = err.find_last_not_of("\n");
    err = nl == std::string::npos ? "" : err.substr(0, nl + 1);
    const size_t last = err.rfind('\n');
    res.result = fmt::format("killed: exit status {}{}{}", res.exit_status, err.empty() ? "" : ": ",
                             last == std::string::npos ? err : err.substr(last + 1));
  }
}

}  // namespace

PythonSandbox::PythonSandbox(SandboxOptions options) : opt_(std::move(options)) {
  FDLLM_CHECK_ARG(opt_.timeout_s > 0 && opt_.grace_s >= 0, "sandbox: timeout_s must be > 0 and grace_s >= 0 (got {}, {})",
                  opt_.timeout_s, opt_.grace_s);
  FDLLM_CHECK_ARG(opt_.memory_bytes >= (64ull << 20), "sandbox: memory_bytes must be at least 64 MiB, got {}",
                  opt_.memory_bytes);
  if (opt_.scratch_root.empty()) opt_.scratch_root = fs::temp_directory_path();
  FDLLM_CHECK_ARG(fs::is_directory(opt_.scratch_root), "sandbox: scratch root '{}' is not a directory",
                  opt_.scratch_root.string());
  python_path_ = resolve_executable(opt_.python);
  FDLLM_CHECK_ARG(!python_path_.empty(), "sandbox: Python interpreter '{}' not found (generated code runs with it)",
                  opt_.python);
  const std::string cmd =
      "'" + python_path_ + "' -s -B -c 'import sys; print(\"%d.%d.%d\" % sys.version_info[:3])' 2>/dev/null";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[64] = {};
    if (fgets(buf, sizeof buf, p)) python_version_ = buf;
    pclose(p);
  }
  while (!python_version_.empty() && (python_version_.back() == '\n' || python_version_.back() == '\r'))
    python_version_.pop_back();
  FDLLM_CHECK_ARG(!python_version_.empty(), "sandbox: '{}' does not run as a Python interpreter", python_path_);
  if (probe_netns(false) == 0)
    net_ = NetMode::kNetns;
  else if (probe_netns(true) == 0)
    net_ = NetMode::kUserNetns;
  else
    net_ = NetMode::kGuard;
}

std::string PythonSandbox::network_isolation() const {
  return net_ == NetMode::kGuard ? "python socket guard" : "network namespace";
}

SandboxResult PythonSandbox::run(const std::string& program) const {
  SandboxResult res;
  std::string tmpl = (opt_.scratch_root / "flashdllm-sandbox-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) {
    res.result = fmt::format("error: cannot create a scratch directory under '{}': {}", opt_.scratch_root.string(),
                             std::strerror(errno));
    return res;
  }
  const fs::path dir = tmpl;
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  {
    std::ofstream f(dir / "program.py", std::ios::binary);
    f << program;
    if (!f) {
      res.result = "error: cannot write program.py into the scratch directory";
      return res;
    }
  }

  // Everything the child needs is prepared before fork (only async-signal-safe calls after it).
  const std::string timeout = fmt::format("{:.6f}", opt_.timeout_s);
  const std::string mode = net_ == NetMode::kGuard ? "guard" : "netns";
  std::vector<std::string> args = {python_path_, "-s", "-B", "-c", kDriver, timeout, mode};
  const std::string dir_s = dir.string();
  std::vector<std::string> env = {"PATH=/usr/bin:/bin",       "HOME=" + dir_s,          "TMPDIR=" + dir_s,
                                  "LANG=C.UTF-8",             "LC_ALL=C.UTF-8",         "PYTHONHASHSEED=0",
                                  "PYTHONIOENCODING=utf-8",   "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1",
                                  "OPENBLAS_NUM_THREADS=1",   "MKL_NUM_THREADS=1"};
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out_fd = open((dir / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err_fd = open((dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  auto close_fds = [&] {
    for (int fd : {null_fd, out_fd, err_fd})
      if (fd >= 0) close(fd);
  };
  if (null_fd < 0 || out_fd < 0 || err_fd < 0) {
    close_fds();
    res.result = fmt::format("error: cannot open the child's standard streams: {}", std::strerror(errno));
    return res;
  }
  const UserMaps maps = make_user_maps();
  const bool netns = net_ != NetMode::kGuard, user_ns = net_ == NetMode::kUserNetns;
  const rlim_t cpu = seconds_limit(opt_.timeout_s + opt_.grace_s);
  struct rlimit lim_cpu = {cpu, cpu + 1}, lim_as = {opt_.memory_bytes, opt_.memory_bytes},
                lim_fsize = {opt_.file_bytes, opt_.file_bytes}, lim_nofile = {256, 256}, lim_core = {0, 0};
  const char* dir_c = dir_s.c_str();

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    close_fds();
    res.result = fmt::format("error: fork failed: {}", std::strerror(errno));
    return res;
  }
  if (pid == 0) {  // child
    setpgid(0, 0);
    if (netns && !enter_netns(user_ns, maps)) _exit(kNamespaceFailure);
    if (chdir(dir_c) != 0) _exit(kExecFailure);
    if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(kExecFailure);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
#endif
      for (int fd = 3; fd < 4096; ++fd) close(fd);
    setrlimit(RLIMIT_CPU, &lim_cpu);
    setrlimit(RLIMIT_AS, &lim_as);
    setrlimit(RLIMIT_FSIZE, &lim_fsize);
    setrlimit(RLIMIT_NOFILE, &lim_nofile);
    setrlimit(RLIMIT_CORE, &lim_core);
    execve(argv[0], argv.data(), envp.data());
    _exit(kExecFailure);
  }
  setpgid(pid, pid);  // also from the parent: no window in which a kill could miss the group
  close_fds();

  const auto deadline = t0 + std::chrono::duration<double>(opt_.timeout_s + opt_.grace_s);
  int st = 0;
  const bool timed_out = wait_until(pid, deadline, st);
  kill(-pid, SIGKILL);  // whatever the program left running in its group
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : 0;
  describe_outcome(res, st, timed_out, dir);
  return res;
}

std::vector<SandboxResult> PythonSandbox::run_all(const std::vector<std::string>& programs,
                                                  const std::function<void(size_t)>& progress) const {
  std::vector<SandboxResult> out(programs.size());
  const size_t jobs = std::max<size_t>(
      1, std::min(programs.size(), opt_.jobs > 0 ? static_cast<size_t>(opt_.jobs)
                                                 : std::max(1u, std::thread::hardware_concurrency())));
  std::atomic<size_t> next{0}, done{0};
  std::mutex mu;
  auto worker = [&] {
    for (size_t i = next++; i < programs.size(); i = next++) {
      out[i] = run(programs[i]);
      const size_t d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(mu);
        progress(d);
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t j = 1; j < jobs; ++j) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return out;
}

}  // namespace flashdllm::eval
