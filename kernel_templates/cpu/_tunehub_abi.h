// tunehub kernel ABI on the CPU: the four extern "C" symbols every CUDA variant exports
// (kernel_templates/cuda/_tunehub_abi.cuh), mapped onto the CPU template contract of _harness.h
// (th_kernel_spec, th_buffer_bytes, th_kernel and the optional th_prepare), so that one loader
// serves a CPU artifact and a CUDA one alike.
//
// A CPU artifact is one standalone shared object per variant (tuner/backends/cpu_artifact.py
// writes its translation unit: this header and _harness.h inlined, the variant's rendered source
// in a namespace of its own, as in a timed batch, then th_abi_exports(), defined below the
// variant, which names its four functions). The timed batches never include this file.
//
//   int tunehub_can_run(dims, n_dims)           0, or a reason code below: BAD_DIMS for another
//                                               count than the variant's num_dims or a negative
//                                               dim; UNSUPPORTED when th_buffer_bytes refuses
//   size_t tunehub_workspace_bytes(dims, n)     always 0 (a CPU variant keeps its own scratch)
//   int tunehub_run(inputs, output, dims, n, workspace, workspace_bytes, stream)
//                                               runs the kernel synchronously on the calling
//                                               thread; workspace and stream are ignored (the
//                                               stream may be null)
//   const char* tunehub_describe()              the variant's procedural name
//
// th_prepare, where a variant defines one (gemm sizes its scratch with it), runs before the
// first call and again whenever the dims differ from the last prepared ones. Such a variant keeps
// state between calls, so its calls are serialized by a mutex; a variant without th_prepare runs
// concurrently from any number of threads.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <mutex>

// Reason codes returned by tunehub_can_run and tunehub_run: the values of the CUDA header
// (kernel_templates/cuda/_tunehub_abi.cuh; tests/tuner/test_cpu_artifact.py checks they agree).
enum TunehubReason : int {
  TUNEHUB_OK = 0,
  TUNEHUB_BAD_DIMS = 1,
  TUNEHUB_MISALIGNED = 2,
  TUNEHUB_UNSUPPORTED = 3,
  TUNEHUB_TOO_LARGE = 4,
  TUNEHUB_LAUNCH_FAILED = 5,
  TUNEHUB_WORKSPACE = 6,
};

namespace th {
namespace abi {

constexpr int kMaxDims = 16;
constexpr int kMaxInputs = 8;

// The variant's side of the template contract, named by the artifact's translation unit.
struct Exports {
  KernelSpec (*spec)();
  const char* (*buffer_bytes)(const int64_t*, size_t*, size_t*);
  void (*kernel)(const int64_t*, const void* const*, void*);
  PrepareFn prepare;  // nullptr when the variant defines no th_prepare
};

inline int check(const Exports& e, const int64_t* dims, int n_dims) {
  const KernelSpec spec = e.spec();
  if (dims == nullptr || n_dims != spec.num_dims || n_dims > kMaxDims) return TUNEHUB_BAD_DIMS;
  for (int i = 0; i < n_dims; ++i) {
    if (dims[i] < 0) return TUNEHUB_BAD_DIMS;
  }
  if (spec.num_inputs > kMaxInputs) return TUNEHUB_UNSUPPORTED;
  size_t input_bytes[kMaxInputs] = {};
  size_t output_bytes = 0;
  return e.buffer_bytes(dims, input_bytes, &output_bytes) == nullptr ? TUNEHUB_OK
                                                                     : TUNEHUB_UNSUPPORTED;
}

// The dims th_prepare last ran for, and the lock that serializes a stateful variant.
struct Prepared {
  std::mutex lock;
  int64_t dims[kMaxDims] = {};
  int n_dims = -1;
};

inline Prepared& prepared() {
  static Prepared state;
  return state;
}

}  // namespace abi
}  // namespace th

// Defined by the artifact's translation unit, after the variant's source.
const th::abi::Exports& th_abi_exports();

extern "C" __attribute__((visibility("default"))) int tunehub_can_run(const int64_t* dims,
                                                                      int n_dims) {
  return th::abi::check(th_abi_exports(), dims, n_dims);
}

extern "C" __attribute__((visibility("default"))) size_t tunehub_workspace_bytes(const int64_t*,
                                                                                 int) {
  return 0;
}

extern "C" __attribute__((visibility("default"))) int tunehub_run(
    const void* const* inputs, void* output, const int64_t* dims, int n_dims, void* workspace,
    size_t workspace_bytes, void* stream) {
  (void)workspace;
  (void)workspace_bytes;
  (void)stream;
  const th::abi::Exports& e = th_abi_exports();
  const int reason = th::abi::check(e, dims, n_dims);
  if (reason != TUNEHUB_OK) return reason;
  if (inputs == nullptr || output == nullptr) return TUNEHUB_UNSUPPORTED;
  const int num_inputs = e.spec().num_inputs;
  for (int i = 0; i < num_inputs; ++i) {
    if (inputs[i] == nullptr) return TUNEHUB_UNSUPPORTED;
  }
  if (e.prepare == nullptr) {
    e.kernel(dims, inputs, output);
    return TUNEHUB_OK;
  }
  th::abi::Prepared& state = th::abi::prepared();
  std::lock_guard<std::mutex> guard(state.lock);
  const size_t bytes = size_t(n_dims) * sizeof(int64_t);
  if (state.n_dims != n_dims || memcmp(state.dims, dims, bytes) != 0) {
    e.prepare(dims);
    memcpy(state.dims, dims, bytes);
    state.n_dims = n_dims;
  }
  e.kernel(dims, inputs, output);
  return TUNEHUB_OK;
}

extern "C" __attribute__((visibility("default"))) const char* tunehub_describe(void) {
  return th_abi_exports().spec().name;
}
