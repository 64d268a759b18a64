// Which block-scaled FP8 GEMMs cuBLASLt offers on this GPU (issue 48's diagnosis: the engine's GEMM
// found no algorithm for either operand order on an H100 with cuBLASLt 13.0). Asks
// cublasLtMatmulAlgoGetHeuristic, for D[M, N] = op(A)[M, K] · B[K, N] with e4m3 A (stored [K, M],
// op T) and B (stored [K, N], op N) as the engine lays them out, over: the scale modes of A and B
// (VEC128_32F = 1 x 128 groups, BLK128x128_32F = 128 x 128 blocks), M (8 to 256; N = 384, K = 512),
// D's leading dimension (M, or M rounded up to 16), bf16 or f32 D, with the engine's 16-byte
// minimum-alignment preferences (without them the answers were the same at 37 to 256 rows). Prints
// one line per case: the status and the number of algorithms. No product is computed (the scale pointers point at
// zeros). Build and run (on the GPU machine):
//   nvcc -std=c++17 -o /tmp/fp8probe tools/diag/cublaslt_fp8_probe.cu -lcublasLt && /tmp/fp8probe
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

const char* mode_name(int32_t m) { return m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ? "VEC128" : "BLK128x128"; }

int query(cublasLtHandle_t h, int32_t a_mode, int32_t b_mode, int64_t M, int64_t N, int64_t K, int64_t ldd,
          cudaDataType_t d_type, bool align_prefs, const void* scales, cublasStatus_t* status) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scales, sizeof(scales));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scales, sizeof(scales));
  cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, K, M, K);
  cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, K, N, K);
  cublasLtMatrixLayoutCreate(&d, d_type, M, N, ldd);
  cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t ws = 32u << 20;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  if (align_prefs) {
    const uint32_t al = 16;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
  }
  cublasLtMatmulHeuristicResult_t r[8]{};
  int found = 0;
  *status = cublasLtMatmulAlgoGetHeuristic(h, op, a, b, d, d, pref, 8, r, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op);
  return *status == CUBLAS_STATUS_SUCCESS ? found : 0;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s (sm_%d%d), cuBLASLt %zu\n", prop.name, prop.major, prop.minor, cublasLtGetVersion());
  cublasLtHandle_t h = nullptr;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  void* scales = nullptr;
  cudaMalloc(&scales, 1 << 20);
  cudaMemset(scales, 0, 1 << 20);
  const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const int32_t modes[4][2] = {{vec, blk}, {blk, vec}, {vec, vec}, {blk, blk}};
  for (const auto& m : modes)
    for (int64_t M : {8, 16, 32, 37, 40, 48, 64, 128, 256})
      for (bool pad : {false, true})
        for (cudaDataType_t dt : {CUDA_R_16BF, CUDA_R_32F})
          for (bool prefs : {true}) {
            const int64_t ldd = pad ? (M + 15) / 16 * 16 : M;
            if (pad && ldd == M) continue;
            cublasStatus_t st{};
            const int found = query(h, m[0], m[1], M, 384, 512, ldd, dt, prefs, scales, &st);
            std::printf("[fp8probe] A %-10s B %-10s M %3lld ldd %3lld D %s align-prefs %d: status %d, %d algorithms\n",
                        mode_name(m[0]), mode_name(m[1]), static_cast<long long>(M), static_cast<long long>(ldd),
                        dt == CUDA_R_16BF ? "bf16" : "f32 ", prefs ? 1 : 0, static_cast<int>(st), found);
          }
  cudaFree(scales);
  cublasLtDestroy(h);
  return 0;
}
