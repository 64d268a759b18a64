// In-process communicators (ranks = threads of one process, host memory) and the launch helpers
// shared by every transport (comm.h).
//
// A collective is two rendezvous of all ranks: (1) every rank publishes its operand(s); (2) after
// the rank has done its share of the work. Between them, rank r reads every rank's operand and
// writes only what it owns: all_reduce_sum partitions the elements (rank r sums elements
// [r·n/N, (r+1)·n/N) of every rank in rank order and writes that sum into every rank's tensor: a
// reduce-scatter and an all-gather in one pass), the gathers write only rank r's own output. The
// second rendezvous keeps any rank from reusing its operand while a peer still reads it.
#include "backend/comm.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "core/dtype.h"

namespace flashdllm {
namespace {

/// The rendezvous point of the in-process ranks.
class LocalHub {
 public:
  explicit LocalHub(int world) : world_(world), a_(static_cast<size_t>(world)), b_(static_cast<size_t>(world)) {}

  int world() const noexcept { return world_; }

  /// Publishes rank's operands and waits until every rank has.
  void publish(int rank, Tensor a, Tensor b) {
    a_[static_cast<size_t>(rank)] = a;
    b_[static_cast<size_t>(rank)] = b;
    wait();
  }
  const Tensor& a(int rank) const { return a_[static_cast<size_t>(rank)]; }
  const Tensor& b(int rank) const { return b_[static_cast<size_t>(rank)]; }

  /// A barrier of all ranks; throws once abort() was called (before or while waiting).
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    check_not_aborted();
    const uint64_t gen = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) check_not_aborted();
  }

  void abort() noexcept {
    std::lock_guard<std::mutex> lk(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  void check_not_aborted() const {
    FDLLM_CHECK(!aborted_, ErrorCode::kInternal,
                "in-process communicator aborted: another tensor-parallel rank failed");
  }

  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<Tensor> a_, b_;  // published operands, one per rank
};

bool same_shape(const Tensor& x, const Tensor& y) {
  if (x.dtype != y.dtype || x.ndim != y.ndim) return false;
  for (int i = 0; i < x.ndim; ++i)
    if (x.shape[i] != y.shape[i]) return false;
  return true;
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return hub_->world(); }
  std::string name() const override { return fmt::format("in-process (rank {} of {})", rank_, hub_->world()); }

  void all_reduce_sum(Tensor t) override {
    check_host(t, "all_reduce_sum", "t");
    FDLLM_CHECK_ARG(t.dtype == DType::kF32 || t.dtype == DType::kBF16,
                    "all_reduce_sum: operand 't' must be F32 or BF16, got {}", t.describe());
    hub_->publish(rank_, t, {});
    const int N = hub_->world();
    check_same("all_reduce_sum", [&](int r) { return same_shape(hub_->a(r), hub_->a(0)); });
    const int64_t n = t.numel(), begin = n * rank_ / N, end = n * (rank_ + 1) / N;
    if (t.dtype == DType::kF32) {
      for (int64_t i = begin; i < end; ++i) {
        float s = hub_->a(0).ptr<float>()[i];
        for (int r = 1; r < N; ++r) s += hub_->a(r).ptr<float>()[i];
        for (int r = 0; r < N; ++r) hub_->a(r).ptr<float>()[i] = s;
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        float s = bf16_to_f32(hub_->a(0).ptr<uint16_t>()[i]);
        for (int r = 1; r < N; ++r) s += bf16_to_f32(hub_->a(r).ptr<uint16_t>()[i]);
        const uint16_t b = f32_to_bf16(s);
        for (int r = 0; r < N; ++r) hub_->a(r).ptr<uint16_t>()[i] = b;
      }
    }
    hub_->wait();
  }

  void all_gather_rows(Tensor local, Tensor out) override {
    check_host(local, "all_gather_rows", "local");
    check_host(out, "all_gather_rows", "out");
    const int N = hub_->world();
    FDLLM_CHECK_ARG(out.dtype == local.dtype && out.rows() == N * local.rows() && out.row_size() == local.row_size(),
                    "all_gather_rows: out must be [{} x {}, {}] {}, got {}", N, local.rows(), local.row_size(),
                    dtype_name(local.dtype), out.describe());
    hub_->publish(rank_, local, out);
    check_same("all_gather_rows", [&](int r) { return same_shape(hub_->a(r), hub_->a(0)); });
    const size_t bytes = local.nbytes();
    for (int r = 0; r < N; ++r)
      if (bytes > 0) std::memcpy(static_cast<char*>(out.data) + static_cast<size_t>(r) * bytes, hub_->a(r).data, bytes);
    hub_->wait();
  }

  void all_gather_columns(Tensor local, Tensor out, Tensor /*scratch*/) override {
    check_host(local, "all_gather_columns", "local");
    check_host(out, "all_gather_columns", "out");
    const int N = hub_->world();
    const int64_t R = local.rows(), C = local.row_size();
    FDLLM_CHECK_ARG(out.dtype == local.dtype && out.rows() == R && out.row_size() == N * C,
                    "all_gather_columns: out must be [{}, {} x {}] {}, got {}", R, N, C, dtype_name(local.dtype),
                    out.describe());
    hub_->publish(rank_, local, out);
    check_same("all_gather_columns", [&](int r) { return same_shape(hub_->a(r), hub_->a(0)); });
    const size_t es = dtype_size(local.dtype), row = static_cast<size_t>(C) * es;
    for (int r = 0; r < N; ++r) {
      const char* src = static_cast<const char*>(hub_->a(r).data);
      char* dst = static_cast<char*>(out.data) + static_cast<size_t>(r) * row;
      for (int64_t i = 0; i < R; ++i)
        std::memcpy(dst + static_cast<size_t>(i) * N * row, src + static_cast<size_t>(i) * row, row);
    }
    hub_->wait();
  }

  void barrier() override { hub_->wait(); }
  void abort() noexcept override { hub_->abort(); }

 private:
  static void check_host(const Tensor& t, const char* op, const char* operand) {
    FDLLM_CHECK_ARG(t.device == DeviceKind::kCPU && (t.data != nullptr || t.numel() == 0),
                    "{}: operand '{}' must be in host memory (the in-process communicator serves the CPU backend), "
                    "got {}",
                    op, operand, t.describe());
  }
  /// Every rank runs the same check over the same published operands, so either all ranks throw
  /// here (before the second rendezvous) or none does.
  template <class Pred>
  void check_same(const char* op, Pred same) const {
    for (int r = 1; r < hub_->world(); ++r)
      FDLLM_CHECK_ARG(same(r), "{}: rank {} passed {} but rank 0 passed {} (ranks must call collectives with equal "
                      "shapes)",
                      op, r, hub_->a(r).describe(), hub_->a(0).describe());
  }

  std::shared_ptr<LocalHub> hub_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_communicators(int world) {
  FDLLM_CHECK_ARG(world >= 1, "in-process communicators: world size must be >= 1, got {}", world);
  auto hub = std::make_shared<LocalHub>(world);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < world; ++r) out.push_back(std::make_unique<LocalCommunicator>(hub, r));
  return out;
}

void validate_tensor_parallel_launch(const TensorParallelLaunch& l) {
  FDLLM_CHECK_ARG(l.world >= 1 && l.world <= (1 << 20),
                  "tensor-parallel launch: world {} (FLASHDLLM_TP_WORLD) must be >= 1", l.world);
  FDLLM_CHECK_ARG(l.rank >= 0 && l.rank < l.world,
                  "tensor-parallel launch: rank {} (FLASHDLLM_TP_RANK) must be in [0, world = {})", l.rank, l.world);
  FDLLM_CHECK_ARG(l.world == 1 || !l.id_file.empty(),
                  "tensor-parallel launch: world {} needs an id file (FLASHDLLM_TP_ID_FILE: where rank 0 publishes "
                  "the NCCL unique id)",
                  l.world);
}

NcclUniqueId exchange_nccl_unique_id(const TensorParallelLaunch& launch, double timeout_seconds) {
  namespace fs = std::filesystem;
  NcclUniqueId id;
  if (launch.rank == 0) {
    id = nccl_unique_id();
    const fs::path tmp = launch.id_file.string() + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      FDLLM_CHECK(f.good(), ErrorCode::kIo, "cannot write the NCCL id file '{}'", tmp.string());
      f.write(id.bytes.data(), static_cast<std::streamsize>(id.bytes.size()));
      FDLLM_CHECK(f.good(), ErrorCode::kIo, "cannot write the NCCL id file '{}'", tmp.string());
    }
    std::error_code ec;
    fs::rename(tmp, launch.id_file, ec);
    FDLLM_CHECK(!ec, ErrorCode::kIo, "cannot publish the NCCL id file '{}': {}", launch.id_file.string(), ec.message());
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  for (;;) {
    std::error_code ec;
    if (fs::exists(launch.id_file, ec) && fs::file_size(launch.id_file, ec) == id.bytes.size()) {
      std::ifstream f(launch.id_file, std::ios::binary);
      f.read(id.bytes.data(), static_cast<std::streamsize>(id.bytes.size()));
      FDLLM_CHECK(f.gcount() == static_cast<std::streamsize>(id.bytes.size()), ErrorCode::kIo,
                  "cannot read the NCCL id file '{}'", launch.id_file.string());
      return id;
    }
    FDLLM_CHECK(std::chrono::steady_clock::now() < deadline, ErrorCode::kIo,
                "rank {}: the NCCL id file '{}' did not appear within {} s (is rank 0 running?)", launch.rank,
                launch.id_file.string(), timeout_seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace flashdllm
