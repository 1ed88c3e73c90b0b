// tunehub kernel ABI: shared by every CUDA template.
//
// Templates pull this file in with a Jinja include of "cuda/_tunehub_abi.cuh" (so the rendered
// source is self-contained and the variant id covers it; keep Jinja syntax out of this file).
// Every template renders to one .cu file built into a shared object that exports the four
// extern "C" symbols declared below. Dims arrive at run time in problem.dim_names order
// (reduce adds the kind code: 0 sum, 1 max, 2 mean; rms_norm adds eps_bits, the IEEE-754 bit
// pattern of the float32 eps as an unsigned 32-bit value held in the int64, read with
// tunehub::eps_from_bits: dims [m, k, eps_bits], inputs [x, w]; tuner/abi.py defines them).
// tunehub_run only enqueues on `stream`: no synchronization, no allocation, no printing.
#ifndef TUNEHUB_ABI_CUH
#define TUNEHUB_ABI_CUH

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define TUNEHUB_EXPORT extern "C" __attribute__((visibility("default")))

// Reason codes returned by tunehub_can_run (0 = runnable).
enum TunehubReason : int {
  TUNEHUB_OK = 0,
  TUNEHUB_BAD_DIMS = 1,       // wrong count or non-positive dims
  TUNEHUB_MISALIGNED = 2,     // a dim breaks the variant's vector width / alignment
  TUNEHUB_UNSUPPORTED = 3,    // shape outside what this variant handles (e.g. row too long)
  TUNEHUB_TOO_LARGE = 4,      // grid or index limits exceeded
  TUNEHUB_LAUNCH_FAILED = 5,  // tunehub_run: the launch reported an error
  TUNEHUB_WORKSPACE = 6,      // tunehub_run: workspace missing or too small
};

TUNEHUB_EXPORT int tunehub_can_run(const int64_t* dims, int n_dims);
TUNEHUB_EXPORT size_t tunehub_workspace_bytes(const int64_t* dims, int n_dims);
TUNEHUB_EXPORT int tunehub_run(const void* const* inputs, void* output, const int64_t* dims,
                               int n_dims, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);
TUNEHUB_EXPORT const char* tunehub_describe(void);

namespace tunehub {

// Storage <-> f32 accumulate conversions for f16 (__half), bf16 (__nv_bfloat16), f32 (float).
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// A pack of N storage elements loaded/stored as one aligned vector access.
template <typename T, int N> struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Maps a launch error to the ABI's return code (launches are asynchronous: this only sees
// configuration errors, never faults inside the kernel).
inline int launch_status() {
  return cudaGetLastError() == cudaSuccess ? TUNEHUB_OK : TUNEHUB_LAUNCH_FAILED;
}

inline bool aligned_to(const void* ptr, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(ptr) % bytes) == 0;
}

// rms_norm's eps from its dim: false for a pattern outside [0, 0x7F800000) (a negative,
// infinite or NaN float32), which no kernel serves (tuner/abi.py: MAX_EPS_BITS).
inline bool eps_from_bits(int64_t bits, float* eps) {
  if (bits < 0 || bits >= 0x7F800000) return false;
  const uint32_t word = static_cast<uint32_t>(bits);
  std::memcpy(eps, &word, sizeof word);
  return true;
}

}  // namespace tunehub

#endif  // TUNEHUB_ABI_CUH
