// tunehub CPU harness, kernel side: the helpers every CPU template includes, and its contract.
//
// Variants are compiled many to a translation unit (tuner/compile.py, build_batched): each
// rendered source is wrapped in its own namespace and exported through C symbols
// thv_<id>_{spec,buffer_bytes,kernel,prepare}; the runner (_runner.cpp, compiled once) loads
// the shared object and times one variant per process, so a crash stays that variant's. The
// command line, the timing loop and its JSON line are documented at the top of _runner.cpp.
// Includes are kept to a minimum (no STL, no intrinsics headers): every batch parses this file
// once, and its parse time is paid by every cold tuning. A template that needs a standard
// header (gemm's std::vector) includes it itself; the batch hoists includes to global scope.
//
// TEMPLATE CONTRACT: a template includes this header and defines, at its global scope,
//   th::KernelSpec th_kernel_spec();                      // {name, num_dims, num_inputs}
//   const char* th_buffer_bytes(const int64_t* dims, size_t* input_bytes, size_t* output_bytes);
//       // fills input_bytes[0..num_inputs) and *output_bytes; returns nullptr, or a message
//       // when the dims cannot be served (the runner exits with code 4 and that message)
//   void th_kernel(const int64_t* dims, const void* const* inputs, void* output);
// and optionally
//   void th_prepare(const int64_t* dims);                 // once before the first call, untimed
// Dims arrive in the order of problem.dim_names (reduce appends the kind code: 0 sum, 1 max,
// 2 mean; rms_norm appends eps_bits, the IEEE-754 bit pattern of the float32 eps as an unsigned
// 32-bit value in the int64, read with eps_from_bits; tuner/abi.py defines both). Storage types: f32 float, f16 _Float16, bf16 th::bf16_t (uint16_t, upper half of a
// float). Accumulate in float. Helpers below: to_float/from_float, Vec<P> (GCC vector
// extension types of P lanes), load_pack/store_pack (P storage elements <-> P floats),
// splat, vmax, hsum, hmax, exp_approx, min/max, eps_from_bits, INFINITY.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif

namespace th {

struct KernelSpec {
  const char* name;
  int num_dims;
  int num_inputs;
};

using bf16_t = uint16_t;

// ---- scalar conversions ------------------------------------------------------------------
inline float to_float(float v) { return v; }
inline float to_float(_Float16 v) { return static_cast<float>(v); }
inline float to_float(bf16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float out;
  __builtin_memcpy(&out, &bits, sizeof out);
  return out;
}

template <typename T> inline T from_float(float v);
template <> inline float from_float<float>(float v) { return v; }
template <> inline _Float16 from_float<_Float16>(float v) { return static_cast<_Float16>(v); }
template <> inline bf16_t from_float<bf16_t>(float v) {
  uint32_t bits;
  __builtin_memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN stays NaN
  bits += 0x7FFFu + ((bits >> 16) & 1u);                    // round to nearest even
  return static_cast<bf16_t>(bits >> 16);
}

// ---- vectors of P lanes (P = 1 is a one-lane vector, so one code path serves every pack) --
template <int P> struct Vec {
  typedef float f32 __attribute__((vector_size(P * sizeof(float))));
  typedef int32_t i32 __attribute__((vector_size(P * sizeof(int32_t))));
  typedef uint32_t u32 __attribute__((vector_size(P * sizeof(uint32_t))));
  typedef uint16_t u16 __attribute__((vector_size(P * sizeof(uint16_t))));
  typedef _Float16 f16 __attribute__((vector_size(P * sizeof(_Float16))));
};

template <int P> inline typename Vec<P>::f32 splat(float v) {
  typename Vec<P>::f32 out;
  for (int i = 0; i < P; ++i) out[i] = v;
  return out;
}

template <int P> inline typename Vec<P>::f32 load_pack(const float* p) {
  typename Vec<P>::f32 out;
  __builtin_memcpy(&out, p, sizeof out);
  return out;
}
// GCC 12 converts _Float16 vectors lane by lane; F16C converts 4 or 8 in one instruction
template <int P> inline typename Vec<P>::f32 load_pack(const _Float16* p) {
#if defined(__F16C__)
  if constexpr (P == 8 || P == 4) {
    typedef short v8hi __attribute__((vector_size(16)));
    v8hi h = {};
    __builtin_memcpy(&h, p, P * sizeof(_Float16));
    if constexpr (P == 8) return (typename Vec<P>::f32)__builtin_ia32_vcvtph2ps256(h);
    else return (typename Vec<P>::f32)__builtin_ia32_vcvtph2ps(h);
  }
#endif
  typename Vec<P>::f16 h;
  __builtin_memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, typename Vec<P>::f32);
}
template <int P> inline typename Vec<P>::f32 load_pack(const bf16_t* p) {
  typename Vec<P>::u16 h;
  __builtin_memcpy(&h, p, sizeof h);
  typename Vec<P>::u32 wide = __builtin_convertvector(h, typename Vec<P>::u32) << 16;
  return (typename Vec<P>::f32)wide;  // same-size vector cast: a bit copy
}

template <int P> inline void store_pack(float* p, typename Vec<P>::f32 v) {
  __builtin_memcpy(p, &v, sizeof v);
}
template <int P> inline void store_pack(_Float16* p, typename Vec<P>::f32 v) {
#if defined(__F16C__)
  if constexpr (P == 8 || P == 4) {  // rounding immediate 0: to nearest even
    typedef short v8hi __attribute__((vector_size(16)));
    v8hi h;
    if constexpr (P == 8) h = __builtin_ia32_vcvtps2ph256(v, 0);
    else h = __builtin_ia32_vcvtps2ph(v, 0);
    __builtin_memcpy(p, &h, P * sizeof(_Float16));
    return;
  }
#endif
  typename Vec<P>::f16 h = __builtin_convertvector(v, typename Vec<P>::f16);
  __builtin_memcpy(p, &h, sizeof h);
}
template <int P> inline void store_pack(bf16_t* p, typename Vec<P>::f32 v) {
  typename Vec<P>::u32 bits = (typename Vec<P>::u32)v;
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // inputs here are finite: no NaN special case
  typename Vec<P>::u16 h = __builtin_convertvector(bits >> 16, typename Vec<P>::u16);
  __builtin_memcpy(p, &h, sizeof h);
}

// rms_norm's eps from its dim: false for a pattern outside [0, 0x7F800000) (a negative,
// infinite or NaN float32), which no kernel serves (tuner/abi.py: MAX_EPS_BITS)
inline bool eps_from_bits(int64_t bits, float* eps) {
  if (bits < 0 || bits >= 0x7F800000) return false;
  const uint32_t word = static_cast<uint32_t>(bits);
  __builtin_memcpy(eps, &word, sizeof word);
  return true;
}

template <typename T> inline T min(T a, T b) { return b < a ? b : a; }
template <typename T> inline T max(T a, T b) { return a < b ? b : a; }

template <int P> inline typename Vec<P>::f32 vmax(typename Vec<P>::f32 a, typename Vec<P>::f32 b) {
  return a > b ? a : b;
}
template <int P> inline float hsum(typename Vec<P>::f32 v) {
  float s = 0.0f;
  for (int i = 0; i < P; ++i) s += v[i];
  return s;
}
template <int P> inline float hmax(typename Vec<P>::f32 v) {
  float m = v[0];
  for (int i = 1; i < P; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// exp(x) per lane, relative error ~2e-7 on [-87, 88]; inputs below are clamped (-inf -> ~0).
// Written with vector ops so it vectorizes without -ffast-math or libmvec.
template <int P> inline typename Vec<P>::f32 exp_approx(typename Vec<P>::f32 x) {
  using F = typename Vec<P>::f32;
  using I = typename Vec<P>::i32;
  x = vmax<P>(x, splat<P>(-87.0f));
  x = x < splat<P>(88.0f) ? x : splat<P>(88.0f);
  F n = x * 1.44269504088896341f;
  I ni = __builtin_convertvector(n + (n >= 0.0f ? splat<P>(0.5f) : splat<P>(-0.5f)), I);
  F nf = __builtin_convertvector(ni, F);
  F r = x - nf * 0.693359375f;  // ln2 split in two for an exact reduction
  r = r + nf * 2.12194440e-4f;
  F p = splat<P>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  I scale = (ni + 127) << 23;
  return p * (F)scale;
}
inline float exp_approx(float x) {
  Vec<1>::f32 v = {x};
  return exp_approx<1>(v)[0];
}

}  // namespace th

namespace th {
using PrepareFn = void (*)(const int64_t*);
}  // namespace th
// found by unqualified lookup inside a variant's namespace when the variant defines no
// th_prepare of its own (a function of that name there hides this)
inline constexpr th::PrepareFn th_prepare = nullptr;
