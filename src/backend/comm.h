// Collectives between tensor-parallel ranks (Megatron-LM layout, Shoeybi et al. 2019, §3): the
// communicator interface the model's sharded forward calls, and its two implementations.
//
//  * In-process ranks (make_local_communicators): N threads of one process, tensors in host memory
//    (the CPU backend). Every collective is a rendezvous of all N ranks; sums run in rank order
//    ((t_0 + t_1) + t_2 ...), so every rank gets the same bits and the result does not depend on
//    thread timing. This is the CPU twin of tensor parallelism and the oracle of its tests.
//  * NCCL (make_nccl_communicator[s], CUDA builds with NCCL): one communicator per GPU, collectives
//    enqueued on the rank's backend stream (asynchronous like every backend op). NCCL is the
//    collective engine: this project writes no GPU collectives of its own. NVLink SHARP / multicast
//    (NVLS) stays off: the communicator sets NCCL_NVLS_ENABLE=0 before the first init, and nothing
//    here calls cuMulticastCreate.
//
// Invariants: every rank calls the same collectives in the same order with tensors of the same
// shape and dtype (SPMD); a rank that fails calls abort() so its peers leave their collective with
// an Error instead of waiting forever; after an abort the communicator stays unusable.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace flashdllm {

class Backend;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const noexcept = 0;
  virtual int world_size() const noexcept = 0;
  /// "in-process (rank 1 of 4)", "nccl 2.28.9 (rank 0 of 2, cuda:0)" ...
  virtual std::string name() const = 0;

  /// In place: t = Σ over ranks of t (element-wise). t: F32 or BF16 (the activation dtypes), the
  /// same shape on every rank, on this communicator's device. In-process: sum in fp32 in rank order
  /// (BF16: one RNE rounding of the fp32 sum), identical bits on every rank. NCCL: ncclAllReduce
  /// (ncclSum) on the rank's stream; the summation order is NCCL's. Throws Error(kInvalidArgument)
  /// for another dtype or mismatched shapes, Error(kDevice) when NCCL fails, Error(kInternal) after
  /// an abort.
  virtual void all_reduce_sum(Tensor t) = 0;

  /// All-gather of rows: local [R, C] on every rank; out [world·R, C] on every rank with rank r's
  /// rows at [r·R, (r+1)·R) (ncclAllGather). Any dtype; errors as all_reduce_sum.
  virtual void all_gather_rows(Tensor local, Tensor out) = 0;

  /// All-gather of column blocks (the vocabulary-parallel LM head's logits): local [R, C] on every
  /// rank; out [R, world·C] with rank r's block at columns [r·C, (r+1)·C). `scratch` (local's dtype,
  /// >= world·R·C elements) is staging for transports that only concatenate buffers (NCCL:
  /// ncclAllGather into scratch, then one strided device copy per rank); when `local` is scratch's
  /// rank-th [R, C] chunk the NCCL gather runs in place. The in-process version copies directly and
  /// ignores scratch. Errors as all_reduce_sum.
  virtual void all_gather_columns(Tensor local, Tensor out, Tensor scratch) = 0;

  /// Returns when every rank has called barrier() (NCCL: after the rank's queued work too).
  virtual void barrier() = 0;

  /// Makes every rank blocked in (or entering) a collective throw Error(kInternal, "... aborted ...")
  /// instead of waiting for a rank that failed. Thread-safe, idempotent; permanent.
  virtual void abort() noexcept = 0;
};

/// `world` communicators of one process whose ranks are threads, for host-memory tensors (the CPU
/// backend). Communicator r must be used by exactly one thread at a time (rank r's). Throws
/// Error(kInvalidArgument) for world < 1.
std::vector<std::unique_ptr<Communicator>> make_local_communicators(int world);

// ------------------------------------------------------------------------------------------ NCCL

/// An NCCL unique id (ncclUniqueId, 128 bytes): made by rank 0, handed to every rank.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};

/// True when this build has NCCL (FLASHDLLM_CUDA=ON and NCCL found at configure time).
bool nccl_available() noexcept;

/// ncclGetUniqueId. Throws Error(kUnsupported) without NCCL, Error(kDevice) when it fails.
NcclUniqueId nccl_unique_id();

/// One rank of a world spread over processes (or hosts): ncclCommInitRank(world, id, rank) on the
/// device and stream of `backend` (a CUDA backend, not a decorator). Blocks until all `world` ranks
/// have joined. Throws Error(kUnsupported) without NCCL, Error(kInvalidArgument) for a rank outside
/// [0, world) or a non-CUDA backend, Error(kDevice) when NCCL fails.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, const NcclUniqueId& id, int rank, int world);

/// One communicator per backend of this process (rank r = backends[r], one GPU each), initialised
/// together (ncclGroupStart / ncclCommInitRank per device / ncclGroupEnd). Errors as above.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<Backend*>& backends);

/// A launcher's rank assignment for one rank per process (multi-process or multi-node). The command
/// line fills it from FLASHDLLM_TP_RANK / _WORLD / _ID_FILE (apps/cli/env_registry.h); world 1 = no
/// launch.
struct TensorParallelLaunch {
  int rank = 0;                    ///< FLASHDLLM_TP_RANK
  int world = 1;                   ///< FLASHDLLM_TP_WORLD
  std::filesystem::path id_file;   ///< FLASHDLLM_TP_ID_FILE: where rank 0 publishes the NCCL unique id
};
/// Throws Error(kInvalidArgument) naming the field (and its variable) for world < 1, a rank outside
/// [0, world), or a world > 1 without an id file.
void validate_tensor_parallel_launch(const TensorParallelLaunch& launch);

/// The id exchange of a launch: rank 0 makes the id (nccl_unique_id) and writes it to
/// launch.id_file atomically (a temporary file, then rename); the other ranks wait up to `timeout`
/// seconds for the file and read it. The file must be on a file system every rank sees (one host:
/// /tmp; several hosts: a shared mount). Throws Error(kIo) on a write/read failure or time-out,
/// Error(kUnsupported) without NCCL.
NcclUniqueId exchange_nccl_unique_id(const TensorParallelLaunch& launch, double timeout_seconds = 300.0);

}  // namespace flashdllm
