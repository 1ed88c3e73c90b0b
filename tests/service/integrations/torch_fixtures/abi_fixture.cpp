// TEST FIXTURE (not a tunehub kernel): a plain f32 CPU library exporting the tunehub ABI
// ("tunehub-1", kernel_templates/cuda/_tunehub_abi.cuh) so the PyTorch ops' loader and
// dispatch are tested against real compiled code. Compiled by tests/service/torch_helpers.py
// with one of -DFIXTURE_GEMM_RCR, -DFIXTURE_GEMM_RRR, -DFIXTURE_SUM, -DFIXTURE_SOFTMAX,
// -DFIXTURE_RMS_NORM, -DFIXTURE_CONV2D, -DFIXTURE_SCALED_GEMM, and optionally:
//   -DFIXTURE_K_MULTIPLE=N   tunehub_can_run refuses (2, misaligned) a k that is not a multiple
//   -DFIXTURE_WORKSPACE=N    asks for N bytes of workspace and writes all of them
//   -DFIXTURE_RUN_FAILS      tunehub_run returns 5 (launch failed)
//   -DFIXTURE_EPILOGUE=N     GEMM_RCR with a fused epilogue, the bias its third input:
//                            1 bias_relu, 2 bias_gelu, 3 bias_silu, 4 gated_silu (output
//                            [m, n/2]: silu(gate + b) * (up + b), gate the first n/2 columns)
// FIXTURE_SCALED_GEMM takes the scaled_gemm ABI (tuner/fp8.py): a [m, k] and b [n, k] e4m3
// bytes, a_scale, b_scale f32 (block: a_scale M-major [k/128, m], b_scale [n/128, k/128]),
// dims [m, n, k, out_code, scaling_code]; it writes bf16 only (out_code 1 is refused, 3).
// FIXTURE_GROUPED_GEMM takes the grouped_gemm ABI (tuner/abi.py) in bf16: a [rows, k] stacked
// by expert, w [E, n, k], dims [E, n, k, tokens, skew, m_0, ..., m_{E-1}]; it refuses counts
// summing past tokens (3) and, with -DFIXTURE_MAX_PER_EXPERT=N, an expert of more than N (4).
// With -DFIXTURE_GROUPED_FP8 it takes grouped_gemm e4m3 (tuner/fp8_grouped.py): a and w e4m3
// bytes, then a_scale f32 [rows] and b_scale f32 [E, n]; the output bf16.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#define EXPORT extern "C" __attribute__((visibility("default")))

#ifndef FIXTURE_K_MULTIPLE
#define FIXTURE_K_MULTIPLE 1
#endif
#ifndef FIXTURE_WORKSPACE
#define FIXTURE_WORKSPACE 0
#endif
#ifndef FIXTURE_EPILOGUE
#define FIXTURE_EPILOGUE 0
#endif

static double activate(double v) {
  switch (FIXTURE_EPILOGUE) {
    case 1: return v > 0 ? v : 0;
    case 2: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case 3:
    case 4: return v / (1.0 + std::exp(-v));
    default: return v;
  }
}

#if defined(FIXTURE_GEMM_RCR) || defined(FIXTURE_GEMM_RRR)
static const int kDims = 3;
static const int kKIndex = 2;
static const char* kName = "fixture gemm";
#elif defined(FIXTURE_SUM)
static const int kDims = 3;
static const int kKIndex = 1;
static const char* kName = "fixture reduce";
#elif defined(FIXTURE_SOFTMAX)
static const int kDims = 2;
static const int kKIndex = 1;
static const char* kName = "fixture softmax";
#elif defined(FIXTURE_RMS_NORM)
static const int kDims = 3;
static const int kKIndex = 1;
static const char* kName = "fixture rms_norm";
#elif defined(FIXTURE_SCALED_GEMM)
static const int kDims = 5;
static const int kKIndex = 2;
static const char* kName = "fixture scaled_gemm";
#elif defined(FIXTURE_GROUPED_GEMM)
static const int kDims = -1;  // 5 + experts
static const int kKIndex = 2;
static const char* kName = "fixture grouped_gemm";
#ifndef FIXTURE_MAX_PER_EXPERT
#define FIXTURE_MAX_PER_EXPERT (1 << 30)
#endif
#elif defined(FIXTURE_CONV2D)
static const int kDims = 10;
static const int kKIndex = 3;  // c: the reduction's inner dim
static const char* kName = "fixture conv2d";
#else
#error "define one FIXTURE_<op>"
#endif

EXPORT int tunehub_can_run(const int64_t* dims, int n_dims) {
#ifdef FIXTURE_GROUPED_GEMM
  if (n_dims < 5 || n_dims != 5 + dims[0]) return 1;
  int64_t routed = 0;
  for (int i = 5; i < n_dims; ++i) {
    if (dims[i] > FIXTURE_MAX_PER_EXPERT) return 4;
    routed += dims[i];
  }
  if (routed > dims[3]) return 3;
#else
  if (n_dims != kDims) return 1;
#endif
  for (int i = 0; i < n_dims; ++i) {
    if (dims[i] < 0) return 1;
  }
  if (dims[kKIndex] % FIXTURE_K_MULTIPLE != 0) return 2;
  if (FIXTURE_EPILOGUE == 4 && dims[1] % 2 != 0) return 2;
#ifdef FIXTURE_SCALED_GEMM
  if (dims[3] != 0) return 3;  // bf16 out only
  if (dims[4] == 1 && (dims[1] % 128 != 0 || dims[2] % 128 != 0)) return 3;
#endif
  return 0;
}

#if defined(FIXTURE_SCALED_GEMM) || defined(FIXTURE_GROUPED_GEMM)
static float bf16_value(uint16_t half) {
  uint32_t bits = (uint32_t)half << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
#endif

#if defined(FIXTURE_SCALED_GEMM) || defined(FIXTURE_GROUPED_GEMM)
static uint16_t to_bf16(float value) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}
#endif

#if defined(FIXTURE_SCALED_GEMM) || defined(FIXTURE_GROUPED_FP8)
static float e4m3(uint8_t code) {  // float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits
  int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
  if ((code & 0x7F) == 0x7F) return NAN;
  float value = exponent == 0 ? std::ldexp(mantissa / 8.0f, -6)
                              : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  return (code & 0x80) ? -value : value;
}
#endif

EXPORT size_t tunehub_workspace_bytes(const int64_t*, int) { return FIXTURE_WORKSPACE; }

EXPORT const char* tunehub_describe(void) { return kName; }

EXPORT int tunehub_run(const void* const* inputs, void* output, const int64_t* dims, int n_dims,
                       void* workspace, size_t workspace_bytes, void* /*stream*/) {
  if (tunehub_can_run(dims, n_dims) != 0) return 1;
#ifdef FIXTURE_RUN_FAILS
  return 5;
#endif
  if (FIXTURE_WORKSPACE > 0) {
    if (workspace == nullptr || workspace_bytes < (size_t)FIXTURE_WORKSPACE) return 6;
    std::memset(workspace, 0x5a, FIXTURE_WORKSPACE);
  }
  const float* x = static_cast<const float*>(inputs[0]);
  float* y = static_cast<float*>(output);
#if defined(FIXTURE_GEMM_RCR) || defined(FIXTURE_GEMM_RRR)
  const float* b = static_cast<const float*>(inputs[1]);
  int64_t m = dims[0], n = dims[1], k = dims[2];
  auto dot = [&](int64_t i, int64_t j) {
    double acc = 0.0;
    for (int64_t p = 0; p < k; ++p) {
#ifdef FIXTURE_GEMM_RCR
      acc += (double)x[i * k + p] * b[j * k + p];
#else
      acc += (double)x[i * k + p] * b[p * n + j];
#endif
    }
    return acc;
  };
#if FIXTURE_EPILOGUE == 0
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y[i * n + j] = (float)dot(i, j);
#elif FIXTURE_EPILOGUE == 4
  const float* bias = static_cast<const float*>(inputs[2]);
  int64_t half = n / 2;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < half; ++j)
      y[i * half + j] = (float)(activate(dot(i, j) + bias[j]) * (dot(i, j + half) + bias[j + half]));
#else
  const float* bias = static_cast<const float*>(inputs[2]);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y[i * n + j] = (float)activate(dot(i, j) + bias[j]);
#endif
#elif defined(FIXTURE_SUM)
  int64_t m = dims[0], k = dims[1];
  if (dims[2] != 0) return 3;  // sums only
  for (int64_t i = 0; i < m; ++i) {
    double acc = 0.0;
    for (int64_t p = 0; p < k; ++p) acc += x[i * k + p];
    y[i] = (float)acc;
  }
#elif defined(FIXTURE_SOFTMAX)
  int64_t m = dims[0], k = dims[1];
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    float top = row[0];
    for (int64_t p = 1; p < k; ++p) top = row[p] > top ? row[p] : top;
    double total = 0.0;
    for (int64_t p = 0; p < k; ++p) total += std::exp((double)row[p] - top);
    for (int64_t p = 0; p < k; ++p) y[i * k + p] = (float)(std::exp((double)row[p] - top) / total);
  }
#elif defined(FIXTURE_RMS_NORM)
  const float* w = static_cast<const float*>(inputs[1]);
  int64_t m = dims[0], k = dims[1];
  uint32_t bits = (uint32_t)dims[2];
  float eps;
  std::memcpy(&eps, &bits, sizeof eps);
  for (int64_t i = 0; i < m; ++i) {
    double squares = 0.0;
    for (int64_t p = 0; p < k; ++p) squares += (double)x[i * k + p] * x[i * k + p];
    float scale = 1.0f / std::sqrt((float)(squares / k) + eps);
    for (int64_t p = 0; p < k; ++p) y[i * k + p] = w[p] * (x[i * k + p] * scale);
  }
#elif defined(FIXTURE_SCALED_GEMM)
  (void)x;
  (void)y;
  const uint8_t* qa = static_cast<const uint8_t*>(inputs[0]);
  const uint8_t* qb = static_cast<const uint8_t*>(inputs[1]);
  const float* sa = static_cast<const float*>(inputs[2]);
  const float* sb = static_cast<const float*>(inputs[3]);
  uint16_t* d = static_cast<uint16_t*>(output);
  int64_t m = dims[0], n = dims[1], k = dims[2];
  bool block = dims[4] == 1;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        double scale = block ? (double)sa[(p / 128) * m + i] * sb[(j / 128) * (k / 128) + p / 128]
                             : (double)sa[0] * sb[0];
        acc += (double)e4m3(qa[i * k + p]) * e4m3(qb[j * k + p]) * scale;
      }
      d[i * n + j] = to_bf16((float)acc);
    }
#elif defined(FIXTURE_GROUPED_GEMM)
  (void)x;
  (void)y;
#ifdef FIXTURE_GROUPED_FP8
  const uint8_t* ga = static_cast<const uint8_t*>(inputs[0]);
  const uint8_t* gw = static_cast<const uint8_t*>(inputs[1]);
  const float* gsa = static_cast<const float*>(inputs[2]);
  const float* gsb = static_cast<const float*>(inputs[3]);
  auto value_a = [&](int64_t i) { return (double)e4m3(ga[i]); };
  auto value_w = [&](int64_t i) { return (double)e4m3(gw[i]); };
#else
  const uint16_t* ga = static_cast<const uint16_t*>(inputs[0]);
  const uint16_t* gw = static_cast<const uint16_t*>(inputs[1]);
  auto value_a = [&](int64_t i) { return (double)bf16_value(ga[i]); };
  auto value_w = [&](int64_t i) { return (double)bf16_value(gw[i]); };
#endif
  uint16_t* gd = static_cast<uint16_t*>(output);
  int64_t experts = dims[0], n = dims[1], k = dims[2], row = 0;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t t = 0; t < dims[5 + e]; ++t, ++row)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) acc += value_a(row * k + p) * value_w((e * n + j) * k + p);
#ifdef FIXTURE_GROUPED_FP8
        acc *= (double)gsa[row] * gsb[e * n + j];
#endif
        gd[row * n + j] = to_bf16((float)acc);
      }
#elif defined(FIXTURE_CONV2D)
  const float* w = static_cast<const float*>(inputs[1]);
  int64_t N = dims[0], H = dims[1], W = dims[2], C = dims[3], K = dims[4], R = dims[5],
          S = dims[6], stride = dims[7], pad = dims[8], dil = dims[9];
  int64_t P = (H + 2 * pad - dil * (R - 1) - 1) / stride + 1;
  int64_t Q = (W + 2 * pad - dil * (S - 1) - 1) / stride + 1;
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q)
        for (int64_t kk = 0; kk < K; ++kk) {
          double acc = 0.0;
          for (int64_t r = 0; r < R; ++r)
            for (int64_t s = 0; s < S; ++s) {
              int64_t h = p * stride - pad + r * dil, ww = q * stride - pad + s * dil;
              if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
              for (int64_t c = 0; c < C; ++c)
                acc += (double)x[((nn * H + h) * W + ww) * C + c] * w[((kk * R + r) * S + s) * C + c];
            }
          y[((nn * P + p) * Q + q) * K + kk] = (float)acc;
        }
#endif
  return 0;
}
