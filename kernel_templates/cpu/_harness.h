// tunehub CPU harness: one executable per variant, compiled once, serving every shape.
//
// COMMAND LINE (built by tuner/backends/cpu.py):
//   <exe> --dims d0 d1 ... --inputs in0.bin [in1.bin ...] --output out.bin
//         --warmup-seconds W --bench-seconds S --min-reps N --max-reps N [--abort-us X]
// Inputs are raw arrays in storage dtype (numpy tofile). The harness poisons the output with
// 0xFF bytes (NaN), runs the kernel once, writes out.bin (Python verifies it), warms up for W
// seconds, then times repetitions with std::chrono::steady_clock until S seconds have passed
// or max reps were taken (never fewer than min reps). Buffers rotate over copies of the
// input+output set so that their total exceeds 64 MB when one set is smaller (at most 16).
// Kernels faster than ~20 us are timed in batches of back-to-back calls; every sample is the
// per-call time of its batch. It prints one JSON line on stdout:
//   {"samples_us": [...], "aborted": false, "calls_per_sample": C, "copies": K}
// With --abort-us X it stops after min reps once the running median exceeds X (aborted=true).
// Exit codes: 0 ok, 2 bad command line, 3 unreadable/mis-sized input or unwritable output,
// 4 dims rejected by the kernel.
//
// TEMPLATE CONTRACT: a template includes this header and defines, at global scope,
//   th::KernelSpec th_kernel_spec();                      // {name, num_dims, num_inputs}
//   const char* th_buffer_bytes(const int64_t* dims, size_t* input_bytes, size_t* output_bytes);
//       // fills input_bytes[0..num_inputs) and *output_bytes; returns nullptr, or a message
//       // when the dims cannot be served (the harness exits with code 4 and that message)
//   void th_kernel(const int64_t* dims, const void* const* inputs, void* output);
// and optionally
//   void th_prepare(const int64_t* dims);                 // once before the first call, untimed
// Dims arrive in the order of problem.dim_names (reduce appends the kind code: 0 sum, 1 max,
// 2 mean). Storage types: f32 float, f16 _Float16, bf16 th::bf16_t (uint16_t, upper half of a
// float). Accumulate in float. Helpers below: to_float/from_float, Vec<P> (GCC vector
// extension types of P lanes), load_pack/store_pack (P storage elements <-> P floats),
// splat, vmax, hsum, hmax, exp_approx. Define TH_NO_MAIN to include the helpers only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#if defined(__F16C__)
#include <immintrin.h>
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
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

template <typename T> inline T from_float(float v);
template <> inline float from_float<float>(float v) { return v; }
template <> inline _Float16 from_float<_Float16>(float v) { return static_cast<_Float16>(v); }
template <> inline bf16_t from_float<bf16_t>(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
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
  std::memcpy(&out, p, sizeof out);
  return out;
}
// GCC 12 converts _Float16 vectors lane by lane; F16C converts 4 or 8 in one instruction
template <int P> inline typename Vec<P>::f32 load_pack(const _Float16* p) {
#if defined(__F16C__)
  if constexpr (P == 8) {
    return (typename Vec<P>::f32)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else if constexpr (P == 4) {
    return (typename Vec<P>::f32)_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
#endif
  typename Vec<P>::f16 h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, typename Vec<P>::f32);
}
template <int P> inline typename Vec<P>::f32 load_pack(const bf16_t* p) {
  typename Vec<P>::u16 h;
  std::memcpy(&h, p, sizeof h);
  typename Vec<P>::u32 wide = __builtin_convertvector(h, typename Vec<P>::u32) << 16;
  return (typename Vec<P>::f32)wide;  // same-size vector cast: a bit copy
}

template <int P> inline void store_pack(float* p, typename Vec<P>::f32 v) {
  std::memcpy(p, &v, sizeof v);
}
template <int P> inline void store_pack(_Float16* p, typename Vec<P>::f32 v) {
#if defined(__F16C__)
  if constexpr (P == 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT));
    return;
  } else if constexpr (P == 4) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_cvtps_ph((__m128)v, _MM_FROUND_TO_NEAREST_INT));
    return;
  }
#endif
  typename Vec<P>::f16 h = __builtin_convertvector(v, typename Vec<P>::f16);
  std::memcpy(p, &h, sizeof h);
}
template <int P> inline void store_pack(bf16_t* p, typename Vec<P>::f32 v) {
  typename Vec<P>::u32 bits = (typename Vec<P>::u32)v;
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // inputs here are finite: no NaN special case
  typename Vec<P>::u16 h = __builtin_convertvector(bits >> 16, typename Vec<P>::u16);
  std::memcpy(p, &h, sizeof h);
}

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
  for (int i = 1; i < P; ++i) m = std::max(m, v[i]);
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

th::KernelSpec th_kernel_spec();
const char* th_buffer_bytes(const int64_t* dims, size_t* input_bytes, size_t* output_bytes);
void th_kernel(const int64_t* dims, const void* const* inputs, void* output);
__attribute__((weak)) void th_prepare(const int64_t* dims);

#ifndef TH_NO_MAIN
namespace th::detail {

constexpr size_t kRotateBytes = size_t(64) << 20;
constexpr int kMaxCopies = 16;
constexpr double kMinSampleUs = 20.0;
constexpr int kMaxCallsPerSample = 4096;

struct Options {
  std::vector<int64_t> dims;
  std::vector<std::string> inputs;
  std::string output;
  double warmup_s = 0.05, bench_s = 0.2, abort_us = -1.0;
  long min_reps = 5, max_reps = 10000;
};

[[noreturn]] inline void fail(int code, const std::string& message) {
  std::fprintf(stderr, "harness: %s\n", message.c_str());
  std::exit(code);
}

inline Options parse(int argc, char** argv) {
  Options o;
  auto is_flag = [](const char* a) { return std::strncmp(a, "--", 2) == 0; };
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) fail(2, flag + " needs a value");
      return argv[++i];
    };
    try {
      if (flag == "--dims") {
        while (i + 1 < argc && !is_flag(argv[i + 1])) o.dims.push_back(std::stoll(argv[++i]));
      } else if (flag == "--inputs") {
        while (i + 1 < argc && !is_flag(argv[i + 1])) o.inputs.emplace_back(argv[++i]);
      } else if (flag == "--output") {
        o.output = value();
      } else if (flag == "--warmup-seconds") {
        o.warmup_s = std::stod(value());
      } else if (flag == "--bench-seconds") {
        o.bench_s = std::stod(value());
      } else if (flag == "--min-reps") {
        o.min_reps = std::stol(value());
      } else if (flag == "--max-reps") {
        o.max_reps = std::stol(value());
      } else if (flag == "--abort-us") {
        o.abort_us = std::stod(value());
      } else {
        fail(2, "unknown argument " + flag);
      }
    } catch (const std::logic_error&) {
      fail(2, "bad value for " + flag);
    }
  }
  if (o.output.empty()) fail(2, "--output is required");
  o.min_reps = std::max(1L, o.min_reps);
  o.max_reps = std::max(o.min_reps, o.max_reps);
  return o;
}

inline void* alloc_bytes(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) fail(3, "out of memory");
  return p;
}

inline void read_file(const std::string& path, void* dst, size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(3, "cannot open " + path);
  size_t got = std::fread(dst, 1, bytes, f);
  bool extra = std::fgetc(f) != EOF;
  std::fclose(f);
  if (got != bytes || extra)
    fail(3, path + " does not hold the expected " + std::to_string(bytes) + " bytes");
}

inline void write_file(const std::string& path, const void* src, size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(src, 1, bytes, f) != bytes) fail(3, "cannot write " + path);
  std::fclose(f);
}

inline double median_of(std::vector<double> v) {
  auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

struct BufferSet {
  std::vector<const void*> inputs;
  void* output;
};

inline int run_main(int argc, char** argv) {
  using clock = std::chrono::steady_clock;
  Options o = parse(argc, argv);
  KernelSpec spec = th_kernel_spec();
  if (static_cast<int>(o.dims.size()) != spec.num_dims)
    fail(2, "expected " + std::to_string(spec.num_dims) + " dims");
  if (static_cast<int>(o.inputs.size()) != spec.num_inputs)
    fail(2, "expected " + std::to_string(spec.num_inputs) + " inputs");
  for (int64_t d : o.dims)
    if (d < 0) fail(4, "dims must not be negative");
  const int64_t* dims = o.dims.data();
  std::vector<size_t> in_bytes(spec.num_inputs);
  size_t out_bytes = 0;
  if (const char* why = th_buffer_bytes(dims, in_bytes.data(), &out_bytes)) fail(4, why);

  size_t set_bytes = out_bytes;
  for (size_t b : in_bytes) set_bytes += b;
  int copies = 1;
  if (set_bytes < kRotateBytes)
    copies = static_cast<int>(std::min<size_t>(kMaxCopies, kRotateBytes / std::max<size_t>(set_bytes, 1) + 1));

  std::vector<BufferSet> sets(copies);
  for (int c = 0; c < copies; ++c) {
    for (int i = 0; i < spec.num_inputs; ++i) {
      void* buf = alloc_bytes(in_bytes[i]);
      if (c == 0) read_file(o.inputs[i], buf, in_bytes[i]);
      else std::memcpy(buf, sets[0].inputs[i], in_bytes[i]);
      sets[c].inputs.push_back(buf);
    }
    sets[c].output = alloc_bytes(out_bytes);
    std::memset(sets[c].output, 0xFF, out_bytes);  // poison: NaN in every float format
  }
  if (th_prepare != nullptr) th_prepare(dims);

  auto call = [&](int c) {
    th_kernel(dims, sets[c].inputs.data(), sets[c].output);
    asm volatile("" : : "r"(sets[c].output) : "memory");  // the result is observed
  };
  call(0);
  write_file(o.output, sets[0].output, out_bytes);

  // warm-up, and calibrate how many back-to-back calls make one sample of >= kMinSampleUs
  int next = 0;
  long warm_calls = 0;
  auto warm_start = clock::now();
  double warm_elapsed = 0.0;
  do {
    call(next);
    next = (next + 1) % copies;
    ++warm_calls;
    warm_elapsed = std::chrono::duration<double>(clock::now() - warm_start).count();
  } while (warm_elapsed < o.warmup_s);
  double per_call_us = warm_elapsed * 1e6 / static_cast<double>(warm_calls);
  int calls = 1;
  if (per_call_us < kMinSampleUs)
    calls = static_cast<int>(std::min<double>(kMaxCallsPerSample, std::ceil(kMinSampleUs / std::max(per_call_us, 1e-3))));

  std::vector<double> samples;
  bool aborted = false;
  auto bench_start = clock::now();
  while (static_cast<long>(samples.size()) < o.max_reps) {
    auto t0 = clock::now();
    for (int j = 0; j < calls; ++j) {
      call(next);
      next = (next + 1) % copies;
    }
    auto t1 = clock::now();
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
    long reps = static_cast<long>(samples.size());
    if (reps < o.min_reps) continue;
    if (o.abort_us > 0 && (reps < 64 || reps % 16 == 0) && median_of(samples) > o.abort_us) {
      aborted = true;
      break;
    }
    if (std::chrono::duration<double>(t1 - bench_start).count() >= o.bench_s) break;
  }

  std::string json = "{\"samples_us\": [";
  char num[32];
  for (size_t i = 0; i < samples.size(); ++i) {
    std::snprintf(num, sizeof num, i ? ", %.6g" : "%.6g", samples[i]);
    json += num;
  }
  json += std::string("], \"aborted\": ") + (aborted ? "true" : "false");
  json += ", \"calls_per_sample\": " + std::to_string(calls) + ", \"copies\": " + std::to_string(copies) + "}";
  std::printf("%s\n", json.c_str());
  for (auto& s : sets) {
    for (const void* p : s.inputs) std::free(const_cast<void*>(p));
    std::free(s.output);
  }
  return 0;
}

}  // namespace th::detail

int main(int argc, char** argv) { return th::detail::run_main(argc, argv); }
#endif  // TH_NO_MAIN
