// Programmatic dependent launch (PDL) of the forward's own kernels: the switch (host side).
//
// On compute capability 9.0+ a kernel launched with the programmatic-stream-serialization attribute
// may be scheduled while the kernel before it in the stream is still finishing; it must then wait
// (cudaGridDependencySynchronize) before it touches memory. Source: CUDA Programming Guide §4.5
// "Programmatic Dependent Launch and Synchronization". kernels/cuda/launch.cuh has the launch helper
// and the device-side wait.
#pragma once

namespace flashdllm::kernels {

/// Whether launch_dependent() (launch.cuh) sets the PDL attribute. Process-wide, default on; the
/// CUDA backend sets it from FLASHDLLM_PDL (0 = off) when it is made. Where the device has no PDL
/// (compute capability < 9.0) the attribute has no effect. Thread-safe.
void set_dependent_launch(bool on) noexcept;
bool dependent_launch() noexcept;

}  // namespace flashdllm::kernels
