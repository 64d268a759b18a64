// The backend's default choices (src/backend/backend_policy.h), without a GPU: the attention kernel
// per device and tile, the small-call exception, the cuDNN route, the QKV rule, row padding, graphs.
#include <gtest/gtest.h>

#include "backend/backend_policy.h"
#include "flashdllm/status.h"

namespace flashdllm {
namespace {

DeviceTraits hopper() {  // an H200 in a build with the sm_90 kernels
  DeviceTraits d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sms = 132;
  d.hopper_attention = true;
  return d;
}
DeviceTraits ampere() {  // an A100: mma.sync kernels only
  DeviceTraits d;
  d.cc_major = 8;
  d.sms = 108;
  return d;
}

TEST(BackendPolicy, DefaultAttentionKernelPerDeviceAndTileRows) {
  const FlashChoice h = default_flash_choice(hopper());
  EXPECT_EQ(h.main, AttentionKernel::kWgmma128);
  EXPECT_EQ(h.split_rows, 65);
  EXPECT_EQ(tile_kernel(h, 16), AttentionKernel::kM64N64);  // the released 16-row tiles
  EXPECT_EQ(tile_kernel(h, 64), AttentionKernel::kM64N64);
  EXPECT_EQ(tile_kernel(h, 65), AttentionKernel::kWgmma128);
  EXPECT_EQ(tile_kernel(h, 128), AttentionKernel::kWgmma128);  // a Flash-Cache window
  EXPECT_EQ(tile_kernel(h, 4096), AttentionKernel::kWgmma128);
  // Without the Hopper kernel (another GPU, or a build without CUTLASS): m64n64 for every tile.
  for (const DeviceTraits& d : {ampere(), [] {
                                  DeviceTraits x = hopper();
                                  x.hopper_attention = false;
                                  return x;
                                }()}) {
    const FlashChoice c = default_flash_choice(d);
    EXPECT_EQ(c.main, AttentionKernel::kM64N64);
    EXPECT_EQ(c.split_rows, 0);
    EXPECT_EQ(tile_kernel(c, 16), AttentionKernel::kM64N64);
    EXPECT_EQ(tile_kernel(c, 128), AttentionKernel::kM64N64);
  }
}

TEST(BackendPolicy, ForcedKernelRunsEveryTile) {
  for (AttentionKernel k : {AttentionKernel::kM64N64, AttentionKernel::kWgmma128, AttentionKernel::kWgmma64}) {
    const FlashChoice c = flash_choice(k, hopper());
    EXPECT_EQ(c.main, k);
    EXPECT_EQ(c.split_rows, 0);
    EXPECT_EQ(tile_kernel(c, 16), k);
  }
  EXPECT_EQ(flash_choice(AttentionKernel::kAuto, hopper()), default_flash_choice(hopper()));
  EXPECT_TRUE(is_hopper_kernel(AttentionKernel::kWgmma64));
  EXPECT_TRUE(is_hopper_kernel(AttentionKernel::kWgmma128));
  EXPECT_FALSE(is_hopper_kernel(AttentionKernel::kM64N64));
}

// wgmma64 where the 64-row units of all rows fit one wave (2·ceil(rows/128)·heads <= SMs).
TEST(BackendPolicy, SmallCallsRunOnWgmma64) {
  // One or two 128-row Flash-Cache slots of 32 heads on 132 SMs: 64 or 128 units.
  EXPECT_EQ(small_call_kernel(AttentionKernel::kWgmma128, 128, 32, 132), AttentionKernel::kWgmma64);
  EXPECT_EQ(small_call_kernel(AttentionKernel::kWgmma128, 256, 32, 132), AttentionKernel::kWgmma64);
  EXPECT_EQ(small_call_kernel(AttentionKernel::kWgmma128, 257, 32, 132), AttentionKernel::kWgmma128);  // 192 units
  EXPECT_EQ(small_call_kernel(AttentionKernel::kWgmma128, 384, 32, 132), AttentionKernel::kWgmma128);
  EXPECT_EQ(small_call_kernel(AttentionKernel::kWgmma128, 128, 66, 132),
            AttentionKernel::kWgmma64);  // exactly one wave
  EXPECT_EQ(small_call_kernel(AttentionKernel::kWgmma128, 128, 67, 132), AttentionKernel::kWgmma128);
  // Other kernels are left alone.
  EXPECT_EQ(small_call_kernel(AttentionKernel::kM64N64, 128, 32, 132), AttentionKernel::kM64N64);
  EXPECT_EQ(small_call_kernel(AttentionKernel::kWgmma64, 384, 32, 132), AttentionKernel::kWgmma64);
}

TEST(BackendPolicy, CudnnRoute) {
  EXPECT_EQ(cudnn_choice(CudnnAttention::kAuto, AttentionKernel::kAuto).min_rows, kCudnnPrefillRows);
  EXPECT_FALSE(cudnn_choice(CudnnAttention::kAuto, AttentionKernel::kAuto).required);
  EXPECT_EQ(cudnn_choice(CudnnAttention::kPrefill, AttentionKernel::kAuto).min_rows, 256);
  EXPECT_TRUE(cudnn_choice(CudnnAttention::kPrefill, AttentionKernel::kAuto).required);
  EXPECT_EQ(cudnn_choice(CudnnAttention::kAll, AttentionKernel::kM64N64).min_rows, 1);
  EXPECT_TRUE(cudnn_choice(CudnnAttention::kAll, AttentionKernel::kM64N64).required);
  EXPECT_EQ(cudnn_choice(CudnnAttention::kOff, AttentionKernel::kAuto).min_rows, 0);
  // The reference attention sends nothing to cuDNN, whatever was asked.
  EXPECT_EQ(cudnn_choice(CudnnAttention::kAll, AttentionKernel::kReference).min_rows, 0);
  EXPECT_FALSE(cudnn_choice(CudnnAttention::kAll, AttentionKernel::kReference).required);
}

// The fused QKV kernel (bench/kernels/) was never measured faster: nothing picks it.
TEST(BackendPolicy, FusedQkvNeverBeatsUnfused) {
  for (int64_t T : {1, 16, 128, 512, 1024, 4096, 8192}) EXPECT_FALSE(fused_qkv_beats_unfused(T)) << T;
}

TEST(BackendPolicy, RowPaddingGraphsAndPicks) {
  EXPECT_EQ(row_padding_for(DeviceKind::kCUDA, std::nullopt).rows, 64);
  EXPECT_EQ(row_padding_for(DeviceKind::kCUDA, std::nullopt).logit_rows, 16);
  EXPECT_EQ(row_padding_for(DeviceKind::kCPU, std::nullopt).rows, 1);
  EXPECT_EQ(row_padding_for(DeviceKind::kCPU, true).rows, 64);
  EXPECT_EQ(row_padding_for(DeviceKind::kCUDA, false).logit_rows, 1);
  BackendOptions o;
  EXPECT_TRUE(cuda_graphs_enabled(o));
  o.sync = SyncMode::kEveryOp;
  EXPECT_FALSE(cuda_graphs_enabled(o)) << "syncing after every op turns graphs off";
  o.sync = SyncMode::kAsync;
  o.cuda_graphs = false;
  EXPECT_FALSE(cuda_graphs_enabled(o));
  EXPECT_TRUE(gemm_picks_apply(0));
  EXPECT_TRUE(gemm_picks_apply(1));
  EXPECT_FALSE(gemm_picks_apply(2));
  DeviceTraits h100{9, 0, 132, true}, a100{8, 0, 108, false}, l40s{8, 9, 142, false};
  EXPECT_TRUE(fp8_gemm_applies(o, h100)) << "the FP8 GEMM is the default route on sm_90";
  EXPECT_FALSE(fp8_gemm_applies(o, a100)) << "Ampere has no FP8 tensor cores";
  EXPECT_FALSE(fp8_gemm_applies(o, l40s)) << "Ada's cuBLASLt scales FP8 per tensor only";
  o.fp8_dequantize = true;
  EXPECT_FALSE(fp8_gemm_applies(o, h100));
}

TEST(BackendPolicy, NamesRoundTripAndOptionsValidate) {
  for (AttentionKernel k : {AttentionKernel::kAuto, AttentionKernel::kReference, AttentionKernel::kM64N64,
                            AttentionKernel::kWgmma128, AttentionKernel::kWgmma64})
    EXPECT_EQ(attention_kernel_from_name(attention_kernel_name(k)), k) << attention_kernel_name(k);
  for (CudnnAttention c : {CudnnAttention::kAuto, CudnnAttention::kPrefill, CudnnAttention::kAll, CudnnAttention::kOff})
    EXPECT_EQ(cudnn_attention_from_name(cudnn_attention_name(c)), c);
  for (GemmBuckets b : {GemmBuckets::kPowerOfTwo, GemmBuckets::kQuarterOctave, GemmBuckets::kExact})
    EXPECT_EQ(gemm_buckets_from_name(gemm_buckets_name(b)), b);
  EXPECT_FALSE(attention_kernel_from_name("m256n64").has_value());
  EXPECT_FALSE(attention_kernel_from_name("wgmma").has_value());  // moved to bench/kernels/, no longer forceable
  BackendOptions o;
  validate_backend_options(o);
  o.gemm_tune = 17;
  EXPECT_THROW(validate_backend_options(o), Error);
  o.gemm_tune = 0;
  o.gemm_picks = GemmPicks::kFile;
  EXPECT_THROW(validate_backend_options(o), Error);
  o.gemm_picks_file = "picks.json";
  validate_backend_options(o);
}

}  // namespace
}  // namespace flashdllm
