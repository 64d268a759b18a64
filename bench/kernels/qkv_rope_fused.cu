// Fused QKV projection + RoPE + K/V cache write: device check, operand check and tile choice; the
// kernel is qkv_rope_sm90.cu. See qkv_rope_fused.h.
#include "bench/kernels/qkv_rope_fused.h"

#include <cstring>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "bench/kernels/qkv_rope_sm90.h"

#ifndef FLASHDLLM_HAVE_QKV_SM90
#define FLASHDLLM_HAVE_QKV_SM90 0
#endif

namespace flashdllm::kernels {
const char* qkv_tile_name(QkvTile t) noexcept {
  switch (t) {
    case QkvTile::kAuto: return "auto";
    case QkvTile::k128x128b: return "128x128b";
    case QkvTile::k128x256b: return "128x256b";
  }
  return "?";
}

bool qkv_tile_from_name(const char* name, QkvTile* out) noexcept {
  if (name == nullptr) return false;
  if (std::strcmp(name, qkv_tile_name(QkvTile::kAuto)) == 0) {
    *out = QkvTile::kAuto;
    return true;
  }
  for (QkvTile t : kQkvTiles)
    if (std::strcmp(name, qkv_tile_name(t)) == 0) {
      *out = t;
      return true;
    }
  return false;
}

QkvConfig qkv_fused_auto(int64_t tokens) noexcept {
  QkvConfig c;
  // bench/results/2026-12-03-h200-qkv-epilogues: 128x128 tiles up to 512 rows, 128x256 above.
  c.tile = tokens <= 512 ? QkvTile::k128x128b : QkvTile::k128x256b;
  return c;
}

int qkv_fused_stages(QkvTile tile) noexcept {
#if FLASHDLLM_HAVE_QKV_SM90
  return qkv_rope_sm90_stages(tile);
#else
  (void)tile;
  return 0;
#endif
}

bool qkv_rope_fused_available() {
  if (!FLASHDLLM_HAVE_QKV_SM90) return false;
  return detail::cached_device_attribute<cudaDevAttrComputeCapabilityMajor>() == 9 &&
         detail::cached_device_attribute<cudaDevAttrComputeCapabilityMinor>() == 0;
}

bool qkv_rope_fused_supported(const FusedQkvArgs& a) noexcept {
  constexpr int64_t kMax = 0x7fffffff;
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  if (a.n_heads <= 0 || a.d_model <= 0 || a.d_model % 8 != 0 || a.d_model > kMax) return false;
  if (3LL * a.n_heads * a.head_dim > kMax || a.tokens < 0 || a.tokens > kMax) return false;
  for (const void* p :
       {static_cast<const void*>(a.xn), static_cast<const void*>(a.wqkv), static_cast<const void*>(a.q_out),
        static_cast<const void*>(a.k_store), static_cast<const void*>(a.v_store)})
    if (!detail::is_aligned(p, 16)) return false;
  return detail::is_aligned(a.cos, 8) && detail::is_aligned(a.sin, 8);
}

void qkv_rope_store_fused_bf16(const FusedQkvArgs& a, cudaStream_t stream, QkvConfig config) {
  if (!qkv_rope_fused_available())
    cuda::throw_unsupported(std::string("qkv_rope_store (fused): needs an sm_90 device and a build with the CUTLASS "
                                        "kernel (") +
                            (FLASHDLLM_HAVE_QKV_SM90 ? "built" : "not built") + ")");
  if (!qkv_rope_fused_supported(a))
    cuda::throw_unsupported("qkv_rope_store (fused): needs head_dim 64 or 128 (got " + std::to_string(a.head_dim) +
                            "), d_model a multiple of 8 (got " + std::to_string(a.d_model) +
                            "), fewer than 2^31 tokens and 16-byte aligned xn / wqkv / q_out / stores");
  if (config.swizzle != 1 && config.swizzle != 2 && config.swizzle != 4 && config.swizzle != 8)
    cuda::throw_invalid_argument("qkv_rope_store (fused): swizzle " + std::to_string(config.swizzle) +
                                 " is not 1, 2, 4 or 8");
  if (a.tokens == 0) return;
  if (config.tile == QkvTile::kAuto) config = qkv_fused_auto(a.tokens);
#if FLASHDLLM_HAVE_QKV_SM90
  qkv_rope_store_sm90(a, config, stream);
#else
  (void)stream;
#endif
}

}  // namespace flashdllm::kernels
