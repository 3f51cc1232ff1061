// The cuda kind's matrix products (kernels.h; dispatch/kernels.h states
// their contract): kMatmulF32 (and kMatmulF32Cpu, kMatmulF32Large, the same
// contract) on cuBLASLt, with a tiled kernel (matmul_f32.comp's) for
// operands whose strides cuBLASLt cannot take or products it has no
// algorithm for; kMatmulI32 as matmul_i32.comp. Built by nvcc without
// abseil.
#include "causeway/backend/cuda/kernels.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace causeway::backend::cuda {
namespace {

using dispatch::Kernel;

constexpr unsigned kBlock = dispatch::kLocalSize;
constexpr uint32_t kMaxBlocks = 65535;

__device__ __forceinline__ uint32_t FirstItem() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ uint32_t GridStride() { return gridDim.x * blockDim.x; }
__device__ __forceinline__ int32_t Wrap(uint32_t v) { return static_cast<int32_t>(v); }
__device__ __forceinline__ uint32_t U(int32_t v) { return static_cast<uint32_t>(v); }

// The parameter block: [0] M, [1] N, [2] K, [3] batch, [4..6] a's
// batch/m/k strides, [7..9] b's batch/k/n strides (elements); out dense
// [batch, M, N].
struct MatmulParams {
  int32_t m, n, k, batch;
  int64_t a_batch, a_m, a_k, b_batch, b_k, b_n;
};

// matmul_f32.comp: one 64x64 tile of out[b] per block of 16x16 threads,
// each accumulating a 4x4 block (rows ly + 16 i, columns lx + 16 j) over K
// in order, the operands through shared memory 16 values of K at a time.
// Any strides; the grid strides over row tiles and batches past the
// grid's limits.
constexpr int kTile = 64;
constexpr int kTileK = 16;

__global__ void __launch_bounds__(256)
    MatmulF32Kernel(const float* a, const float* b, float* out, MatmulParams p) {
  __shared__ float ta[kTileK][kTile + 1];  // ta[k][m], padded against bank conflicts
  __shared__ float tb[kTileK][kTile];      // tb[k][n]
  const int lx = static_cast<int>(threadIdx.x), ly = static_cast<int>(threadIdx.y);
  const int t = ly * 16 + lx;
  const int col0 = static_cast<int>(blockIdx.x) * kTile;
  for (int64_t batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    const float* ab = a + batch * p.a_batch;
    const float* bb = b + batch * p.b_batch;
    for (int64_t tile = blockIdx.y; tile * kTile < p.m; tile += gridDim.y) {
      const int row0 = static_cast<int>(tile) * kTile;
      float acc[4][4] = {};
      for (int k0 = 0; k0 < p.k; k0 += kTileK) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int idx = t + 256 * e;
          const int am = idx / kTileK, ak = idx % kTileK;  // k fastest
          const int gm = row0 + am, gk = k0 + ak;
          ta[ak][am] = (gm < p.m && gk < p.k) ? ab[gm * p.a_m + gk * p.a_k] : 0.0f;
          const int bk = idx / kTile, bn = idx % kTile;  // n fastest
          const int gk2 = k0 + bk, gn = col0 + bn;
          tb[bk][bn] = (gk2 < p.k && gn < p.n) ? bb[gk2 * p.b_k + gn * p.b_n] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kTileK; ++k) {
          float av[4], bv[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) av[i] = ta[k][ly + 16 * i];
#pragma unroll
          for (int j = 0; j < 4; ++j) bv[j] = tb[k][lx + 16 * j];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
          }
        }
        __syncthreads();
      }
      float* ob = out + batch * p.m * p.n;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = row0 + ly + 16 * i;
        if (r >= p.m) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = col0 + lx + 16 * j;
          if (c < p.n) ob[int64_t{r} * p.n + c] = acc[i][j];
        }
      }
    }
  }
}

// matmul_i32.comp: one result element per item, wrapping arithmetic.
__global__ void MatmulI32Kernel(const int32_t* a, const int32_t* b, int32_t* o, uint32_t n,
                                MatmulParams p) {
  for (uint32_t item = FirstItem(); item < n; item += GridStride()) {
    const int64_t i = item;
    const int64_t col = i % p.n, row = (i / p.n) % p.m, batch = i / (int64_t{p.n} * p.m);
    const int32_t* ar = a + batch * p.a_batch + row * p.a_m;
    const int32_t* bc = b + batch * p.b_batch + col * p.b_n;
    uint32_t acc = 0;
    for (int32_t k = 0; k < p.k; ++k) acc += U(ar[k * p.a_k]) * U(bc[k * p.b_k]);
    o[item] = Wrap(acc);
  }
}

void SetError(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
}

// The launch just enqueued: 0, or its error named after `what`.
int LaunchResult(const char* what, std::string* error) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return 0;
  SetError(error, std::string("cuda kernel ") + what + ": " + cudaGetErrorString(e));
  return static_cast<int>(e);
}

MatmulParams ReadMatmulParams(const int32_t* h) {
  return MatmulParams{h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]};
}

// kMatmulF32 on cuBLASLt.

// A row-major R x C operand with strides (sr, sc) as cuBLASLt takes its
// transpose (C x R, column-major): stored column-major C x R with leading
// dimension sr (sc == 1), or R x C with leading dimension sc (sr == 1)
// and transposed by the op. A dimension of 1 leaves its stride free.
struct Operand {
  bool valid = false;
  bool transpose = false;
  int64_t rows = 0, cols = 0, ld = 0;  // as stored
  int64_t batch_stride = 0;
  uint32_t alignment = 0;  // bytes

  auto operator<=>(const Operand&) const = default;
};

Operand Describe(int64_t r, int64_t c, int64_t sr, int64_t sc) {
  if (c == 1 || sc == 1) {
    const int64_t ld = r == 1 ? c : sr;
    if (ld >= c && ld >= 1) return {true, false, c, r, ld};
  }
  if (r == 1 || sr == 1) {
    const int64_t ld = c == 1 ? r : sc;
    if (ld >= r && ld >= 1) return {true, true, r, c, ld};
  }
  return {};
}

// The alignment (bytes, 4 to 256) every matrix of a strided batch keeps.
uint32_t Alignment(const void* p, int64_t ld, int64_t batch_stride) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(p) | static_cast<uint64_t>(ld) * 4 |
                        static_cast<uint64_t>(batch_stride) * 4;
  uint32_t a = 256;
  while (a > 4 && (bits & (a - 1)) != 0) a >>= 1;
  return a;
}

// Everything a product's plan depends on. a and b are cuBLASLt's operands:
// the product's b and a (out^T = b^T a^T).
struct MatmulKey {
  uintptr_t handle = 0;
  uint64_t workspace = 0;
  bool tf32 = false;
  int64_t m = 0, n = 0, k = 0, batch = 0;  // the product's
  Operand a, b;
  uint32_t out_alignment = 0;

  auto operator<=>(const MatmulKey&) const = default;
};

// A product's cuBLASLt descriptors and chosen algorithm; `cublas` false
// where the heuristic found none (the tiled kernel runs it).
struct MatmulPlan {
  bool cublas = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};

  void Destroy() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    *this = MatmulPlan{};
  }
};

// Plans by key, kept for the process (a training step reuses its shapes,
// and the heuristic runs once per shape); at most kMaxPlans, past which a
// plan is made and destroyed per product.
constexpr size_t kMaxPlans = 4096;
std::mutex plans_mu;
std::map<MatmulKey, MatmulPlan>* plans = nullptr;  // guarded by plans_mu; never freed

cublasStatus_t LayoutCreate(cublasLtMatrixLayout_t* layout, int64_t rows, int64_t cols,
                            int64_t ld, int64_t batch, int64_t stride) {
  cublasStatus_t s = cublasLtMatrixLayoutCreate(layout, CUDA_R_32F, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), ld);
  if (s != CUBLAS_STATUS_SUCCESS || batch == 1) return s;
  const int32_t count = static_cast<int32_t>(batch);
  s = cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                       sizeof(count));
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  return cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                          &stride, sizeof(stride));
}

// Makes `plan` for `key`: descriptors, then the heuristic's first choice.
// Errors are cuBLASLt's, `*failed` naming the call; no algorithm is not an
// error (plan->cublas stays false).
cublasStatus_t MakePlan(const MatmulKey& key, MatmulPlan* plan, const char** failed) {
  *failed = "cublasLtMatmulDescCreate";
  cublasStatus_t s = cublasLtMatmulDescCreate(
      &plan->desc, key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const cublasOperation_t ta = key.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  *failed = "cublasLtMatmulDescSetAttribute";
  s = cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  }
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  *failed = "cublasLtMatrixLayoutCreate";
  s = LayoutCreate(&plan->a, key.a.rows, key.a.cols, key.a.ld, key.batch, key.a.batch_stride);
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = LayoutCreate(&plan->b, key.b.rows, key.b.cols, key.b.ld, key.batch, key.b.batch_stride);
  }
  if (s == CUBLAS_STATUS_SUCCESS) {  // D: out^T, N x M column-major, dense
    s = LayoutCreate(&plan->d, key.n, key.m, key.n, key.batch, key.m * key.n);
  }
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  *failed = "cublasLtMatmulPreferenceCreate";
  cublasLtMatmulPreference_t pref = nullptr;
  s = cublasLtMatmulPreferenceCreate(&pref);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  *failed = "cublasLtMatmulPreferenceSetAttribute";
  s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &key.workspace, sizeof(key.workspace));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.a.alignment},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.b.alignment},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.out_alignment},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.out_alignment}};
  for (const auto& [attribute, bytes] : alignments) {
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulPreferenceSetAttribute(pref, attribute, &bytes, sizeof(bytes));
    }
  }
  if (s == CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(
        reinterpret_cast<cublasLtHandle_t>(key.handle), plan->desc, plan->a, plan->b, plan->d,
        plan->d, pref, 1, &result, &returned);
    plan->cublas =
        h == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (plan->cublas) plan->algo = result.algo;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  return s;
}

int LaunchMatmulF32(Kernel kernel, const KernelArgs& args, const Libraries& libs,
                    cudaStream_t stream, std::string* error) {
  const MatmulParams p = ReadMatmulParams(args.host_params);
  if (p.m <= 0 || p.n <= 0 || p.batch <= 0) return 0;
  const int64_t total = int64_t{p.batch} * p.m * p.n;
  if (p.k <= 0) {  // a sum of nothing
    const cudaError_t e =
        cudaMemsetAsync(args.out, 0, static_cast<size_t>(total) * sizeof(float), stream);
    if (e == cudaSuccess) return 0;
    SetError(error, std::string("cuda kernel ") + dispatch::KernelName(kernel) +
                        ": zeroing the result: " + cudaGetErrorString(e));
    return static_cast<int>(e);
  }
  // Column-major: out^T (N x M) = b^T (N x K) * a^T (K x M).
  MatmulKey key;
  key.a = Describe(p.k, p.n, p.b_k, p.b_n);
  key.b = Describe(p.m, p.k, p.a_m, p.a_k);
  const bool batched = p.batch > 1;
  key.a.batch_stride = batched ? p.b_batch : 0;
  key.b.batch_stride = batched ? p.a_batch : 0;
  if (libs.cublaslt != nullptr && key.a.valid && key.b.valid && key.a.batch_stride >= 0 &&
      key.b.batch_stride >= 0) {
    key.handle = reinterpret_cast<uintptr_t>(libs.cublaslt);
    key.workspace = libs.workspace != nullptr ? libs.workspace_bytes : 0;
    key.tf32 = libs.tf32;
    key.m = p.m;
    key.n = p.n;
    key.k = p.k;
    key.batch = p.batch;
    key.a.alignment = Alignment(args.b, key.a.ld, key.a.batch_stride);
    key.b.alignment = Alignment(args.a, key.b.ld, key.b.batch_stride);
    key.out_alignment = Alignment(args.out, p.n, batched ? total / p.batch : 0);
    MatmulPlan plan;
    bool cached = false;
    {
      std::lock_guard<std::mutex> lock(plans_mu);
      if (plans == nullptr) plans = new std::map<MatmulKey, MatmulPlan>();
      if (const auto it = plans->find(key); it != plans->end()) {
        plan = it->second;  // never destroyed while cached
        cached = true;
      } else {
        const char* failed = "";
        if (const cublasStatus_t s = MakePlan(key, &plan, &failed); s != CUBLAS_STATUS_SUCCESS) {
          plan.Destroy();
          SetError(error, std::string("cuda kernel ") + dispatch::KernelName(kernel) + ": " +
                              failed + ": " + cublasLtGetStatusString(s));
          return static_cast<int>(s);
        }
        if (plans->size() < kMaxPlans) {
          plans->emplace(key, plan);
          cached = true;
        }
      }
    }
    if (plan.cublas) {
      const float alpha = 1.0f, beta = 0.0f;
      const cublasStatus_t s = cublasLtMatmul(
          static_cast<cublasLtHandle_t>(libs.cublaslt), plan.desc, &alpha, args.b, plan.a,
          args.a, plan.b, &beta, args.out, plan.d, args.out, plan.d, &plan.algo,
          key.workspace > 0 ? libs.workspace : nullptr, static_cast<size_t>(key.workspace),
          stream);
      if (!cached) plan.Destroy();
      if (s != CUBLAS_STATUS_SUCCESS) {
        SetError(error, std::string("cuda kernel ") + dispatch::KernelName(kernel) +
                            ": cublasLtMatmul: " + cublasLtGetStatusString(s));
        return static_cast<int>(s);
      }
      return 0;
    }
    if (!cached) plan.Destroy();
  }
  // The tiled kernel: strides cuBLASLt cannot take, or no algorithm.
  const dim3 grid(static_cast<unsigned>((p.n + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min(65535, (p.m + kTile - 1) / kTile)),
                  static_cast<unsigned>(std::min(65535, p.batch)));
  MatmulF32Kernel<<<grid, dim3(16, 16), 0, stream>>>(static_cast<const float*>(args.a),
                                                     static_cast<const float*>(args.b),
                                                     static_cast<float*>(args.out), p);
  return LaunchResult(dispatch::KernelName(kernel), error);
}

}  // namespace

namespace internal {

// Declared by kernels.cu, which calls it from Launch.
int LaunchMatmul(dispatch::Kernel kernel, const KernelArgs& args, const Libraries& libs,
                 void* stream, std::string* error);

int LaunchMatmul(dispatch::Kernel kernel, const KernelArgs& args, const Libraries& libs,
                 void* stream, std::string* error) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (kernel != Kernel::kMatmulI32) return LaunchMatmulF32(kernel, args, libs, s, error);
  const MatmulParams p = ReadMatmulParams(args.host_params);
  if (args.n == 0) return 0;
  const uint32_t blocks = std::clamp<uint32_t>((args.n + kBlock - 1) / kBlock, 1, kMaxBlocks);
  MatmulI32Kernel<<<blocks, kBlock, 0, s>>>(static_cast<const int32_t*>(args.a),
                                            static_cast<const int32_t*>(args.b),
                                            static_cast<int32_t*>(args.out), args.n, p);
  return LaunchResult(dispatch::KernelName(kernel), error);
}

}  // namespace internal
}  // namespace causeway::backend::cuda
