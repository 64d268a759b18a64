// The backend's default choices (backend_policy.h) and the names of BackendOptions' values.
#include "backend/backend_policy.h"

#include <array>
#include <utility>

#include "core/check.h"

namespace flashdllm {

FlashChoice default_flash_choice(const DeviceTraits& device) noexcept {
  if (!device.hopper_attention) return {};
  return {AttentionKernel::kWgmma128, 65};
}

FlashChoice flash_choice(AttentionKernel attention, const DeviceTraits& device) noexcept {
  if (attention == AttentionKernel::kAuto || attention == AttentionKernel::kReference)
    return default_flash_choice(device);
  return {attention, 0};
}

AttentionKernel tile_kernel(const FlashChoice& choice, int64_t tile_rows) noexcept {
  return choice.split_rows > 0 && tile_rows < choice.split_rows ? kSmallTileKernel : choice.main;
}

AttentionKernel small_call_kernel(AttentionKernel main, int64_t q_rows, int n_heads, int sms) noexcept {
  if (main != AttentionKernel::kWgmma128) return main;
  return 2 * ((q_rows + 127) / 128) * n_heads <= sms ? AttentionKernel::kWgmma64 : main;
}

CudnnChoice cudnn_choice(CudnnAttention cudnn, AttentionKernel attention) noexcept {
  if (attention == AttentionKernel::kReference) return {};
  switch (cudnn) {
    case CudnnAttention::kAuto: return {kCudnnPrefillRows, false};
    case CudnnAttention::kPrefill: return {kCudnnPrefillRows, true};
    case CudnnAttention::kAll: return {1, true};
    case CudnnAttention::kOff: break;
  }
  return {};
}

bool fused_qkv_beats_unfused(int64_t /*tokens*/) noexcept { return false; }

Backend::RowPadding row_padding_for(DeviceKind device, std::optional<bool> requested) noexcept {
  const bool on = requested.value_or(device == DeviceKind::kCUDA);
  return on ? Backend::RowPadding{64, 16} : Backend::RowPadding{};
}

bool cuda_graphs_enabled(const BackendOptions& options) noexcept {
  return options.cuda_graphs && options.sync != SyncMode::kEveryOp;
}

// ------------------------------------------------------------------------------------- names

namespace {

template <class E, size_t N>
std::optional<E> from_name(const std::array<std::pair<E, const char*>, N>& names, std::string_view name) noexcept {
  for (const auto& [value, text] : names)
    if (name == text) return value;
  return std::nullopt;
}
template <class E, size_t N>
const char* to_name(const std::array<std::pair<E, const char*>, N>& names, E value) noexcept {
  for (const auto& [v, text] : names)
    if (v == value) return text;
  return "?";
}

constexpr std::array<std::pair<AttentionKernel, const char*>, 5> kAttentionNames{{
    {AttentionKernel::kAuto, "auto"},
    {AttentionKernel::kReference, "reference"},
    {AttentionKernel::kM64N64, "m64n64"},
    {AttentionKernel::kWgmma128, "wgmma128"},
    {AttentionKernel::kWgmma64, "wgmma64"},
}};
constexpr std::array<std::pair<CudnnAttention, const char*>, 4> kCudnnNames{{
    {CudnnAttention::kAuto, "auto"},
    {CudnnAttention::kPrefill, "prefill"},
    {CudnnAttention::kAll, "all"},
    {CudnnAttention::kOff, "off"},
}};
}  // namespace

const char* attention_kernel_name(AttentionKernel k) noexcept { return to_name(kAttentionNames, k); }
std::optional<AttentionKernel> attention_kernel_from_name(std::string_view name) noexcept {
  return from_name(kAttentionNames, name);
}
const char* cudnn_attention_name(CudnnAttention c) noexcept { return to_name(kCudnnNames, c); }
std::optional<CudnnAttention> cudnn_attention_from_name(std::string_view name) noexcept {
  return from_name(kCudnnNames, name);
}

void validate_backend_options(const BackendOptions& o) {
  FDLLM_CHECK_ARG(o.gemm_tune >= 0 && o.gemm_tune <= 16, "backend option gemm_tune {} is not in [0, 16]", o.gemm_tune);
  FDLLM_CHECK_ARG(o.gemm_picks != GemmPicks::kFile || !o.gemm_picks_file.empty(),
                  "backend option gemm_picks is 'file' but gemm_picks_file is empty");
}

}  // namespace flashdllm
