// tunehub CPU runner: compiled once per compiler and flags; it times variants, each in a
// process of its own.
//
// COMMAND LINE (started by tuner/backends/cpu.py, one runner per problem):
//   <runner> --dims d0 d1 ... --inputs in0.bin [...] --warmup-seconds W --bench-seconds S
//            --min-reps N --max-reps N --target-ci R --run-timeout T
// It reads the inputs (raw arrays in storage dtype, numpy tofile) once, and makes rotation
// copies of them so that the copies exceed 64 MB when one set is smaller (at most 16). Then
// it serves requests, one a line on stdin, fields separated by tabs:
//   <library.so> \t <symbol prefix> \t <output path> \t <abort us, or 0>
// For each it forks a child, which inherits the inputs (shared pages, only read), loads the
// variant's exports (thv_<id>_spec, _buffer_bytes, _kernel, _prepare; see _harness.h) from
// the shared object its batch was compiled into, poisons its outputs with 0xFF bytes (NaN),
// runs the kernel once, writes <output> (Python verifies it), warms up (at least one call and
// min(W, 10 ms)) and times: it repeats until the 95% confidence interval of the median is
// within R of it (order statistics, the rule of tuner/stats.py), never fewer than N reps
// (3 once S seconds are spent), at most S seconds or max reps. Kernels faster than ~20 us
// are timed in batches of
// back-to-back calls; every sample is the per-call time of its batch. The child's CPU time
// over the timed loop is reported beside its wall time: a share well below 1 means another
// process took the core (interference); tunehub's own work cannot trip it, since the CPU
// backend compiles nothing while it times. The child writes <output>.json:
//   {"samples_us": [...], "aborted": false, "calls_per_sample": C, "copies": K,
//    "cpu_seconds": c, "wall_seconds": w, "median_ci_rel": r}
// and its stderr to <output>.err. With an abort threshold X > 0 (the engine passes the best
// median so far plus the tie band) it stops after min reps once the whole confidence interval
// of the median lies above X: clearly slower than the best (aborted=true); a kernel far
// slower (every sample, after two, above kFarSlower * X) stops then: no drift of a shared
// host makes a contender look twice as slow in every sample. A crash or a hang (killed after T seconds)
// ends only the child. The runner answers every request with one line on stdout:
//   {"exit": code} | {"signal": number} | {"timeout": true}
// Child exit codes: 0 ok, 2 bad request, 3 mis-sized input or unwritable output, 4 dims
// rejected by the kernel, 5 library or symbol not found. The runner exits on end of input.
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "_harness.h"

namespace {

constexpr size_t kRotateBytes = size_t(64) << 20;
constexpr int kMaxCopies = 16;
constexpr double kMinSampleUs = 20.0;
constexpr int kMaxCallsPerSample = 4096;
constexpr double kMaxWarmupS = 0.01;
// the verification call already paged the output in; a call of milliseconds needs no more
constexpr int kMinWarmupCalls = 1;
constexpr long kFarSlowerReps = 2;
constexpr double kFarSlower = 2.0;
constexpr long kMinRepsAtCap = 3;
constexpr double kCiZ = 1.96;  // 95%

struct Options {
  std::vector<int64_t> dims;
  std::vector<std::string> inputs;
  double warmup_s = 0.05, bench_s = 0.2, target_ci = 0.01, run_timeout_s = 60.0;
  long min_reps = 10, max_reps = 10000;
};

struct Request {
  std::string library, symbol, output;
  double abort_us = -1.0;
};

struct Exports {
  th::KernelSpec (*spec)();
  const char* (*buffer_bytes)(const int64_t*, size_t*, size_t*);
  void (*kernel)(const int64_t*, const void* const*, void*);
  th::PrepareFn (*prepare)();
};

[[noreturn]] void fail(int code, const std::string& message) {
  std::fprintf(stderr, "runner: %s\n", message.c_str());
  std::fflush(stderr);
  _exit(code);
}

Options parse(int argc, char** argv) {
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
      } else if (flag == "--warmup-seconds") {
        o.warmup_s = std::stod(value());
      } else if (flag == "--bench-seconds") {
        o.bench_s = std::stod(value());
      } else if (flag == "--min-reps") {
        o.min_reps = std::stol(value());
      } else if (flag == "--max-reps") {
        o.max_reps = std::stol(value());
      } else if (flag == "--target-ci") {
        o.target_ci = std::stod(value());
      } else if (flag == "--run-timeout") {
        o.run_timeout_s = std::stod(value());
      } else {
        fail(2, "unknown argument " + flag);
      }
    } catch (const std::logic_error&) {
      fail(2, "bad value for " + flag);
    }
  }
  o.min_reps = std::max(1L, o.min_reps);
  o.max_reps = std::max(o.min_reps, o.max_reps);
  return o;
}

Exports load(const Request& o) {
  void* handle = dlopen(o.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) fail(5, std::string("cannot load ") + o.library + ": " + dlerror());
  auto sym = [&](const char* suffix) {
    std::string name = o.symbol + suffix;
    void* p = dlsym(handle, name.c_str());
    if (p == nullptr) fail(5, "symbol " + name + " not found in " + o.library);
    return p;
  };
  Exports e;
  e.spec = reinterpret_cast<th::KernelSpec (*)()>(sym("_spec"));
  e.buffer_bytes =
      reinterpret_cast<const char* (*)(const int64_t*, size_t*, size_t*)>(sym("_buffer_bytes"));
  e.kernel = reinterpret_cast<void (*)(const int64_t*, const void* const*, void*)>(sym("_kernel"));
  e.prepare = reinterpret_cast<th::PrepareFn (*)()>(sym("_prepare"));
  return e;
}

void* alloc_bytes(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) fail(3, "out of memory");
  return p;
}

void read_file(const std::string& path, void* dst, size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(3, "cannot open " + path);
  size_t got = std::fread(dst, 1, bytes, f);
  bool extra = std::fgetc(f) != EOF;
  std::fclose(f);
  if (got != bytes || extra)
    fail(3, path + " does not hold the expected " + std::to_string(bytes) + " bytes");
}

void write_file(const std::string& path, const void* src, size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(src, 1, bytes, f) != bytes) fail(3, "cannot write " + path);
  std::fclose(f);
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct MedianCi {
  double median, rel, low;  // rel: half the CI width over the median; low: its lower end
};

// the 95% CI of the median from order statistics: ranks n/2 -+ 1.96 sqrt(n) / 2
MedianCi median_ci(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const long n = static_cast<long>(v.size());
  const double half = kCiZ * std::sqrt(double(n)) / 2.0;
  const long lo = std::max(0L, static_cast<long>(std::floor(n / 2.0 - half)));
  const long hi = std::min(n - 1, static_cast<long>(std::ceil(n / 2.0 + half)));
  const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {median, median > 0 ? (v[hi] - v[lo]) / (2.0 * median) : 0.0, v[lo]};
}

struct Inputs {
  std::vector<size_t> bytes;                   // per input, the size of its file
  std::vector<std::vector<const void*>> sets;  // [copy][input]
};

size_t file_size(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(3, "cannot open " + path);
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  std::fclose(f);
  if (size < 0) fail(3, "cannot size " + path);
  return static_cast<size_t>(size);
}

Inputs load_inputs(const Options& o) {
  Inputs in;
  size_t set_bytes = 0;
  for (const auto& path : o.inputs) {
    in.bytes.push_back(file_size(path));
    set_bytes += in.bytes.back();
  }
  int copies = 1;
  if (set_bytes < kRotateBytes)
    copies = static_cast<int>(
        std::min<size_t>(kMaxCopies, kRotateBytes / std::max<size_t>(set_bytes, 1) + 1));
  in.sets.resize(copies);
  for (int c = 0; c < copies; ++c) {
    for (size_t i = 0; i < o.inputs.size(); ++i) {
      void* buf = alloc_bytes(in.bytes[i]);
      if (c == 0) read_file(o.inputs[i], buf, in.bytes[i]);
      else std::memcpy(buf, in.sets[0][i], in.bytes[i]);
      in.sets[c].push_back(buf);
    }
  }
  return in;
}

// one variant, in the forked child: never returns
[[noreturn]] void child(const Options& o, const Inputs& in, const Request& rq) {
  using clock = std::chrono::steady_clock;
  if (std::freopen((rq.output + ".err").c_str(), "w", stderr) == nullptr) _exit(3);
  Exports ex = load(rq);
  th::KernelSpec spec = ex.spec();
  if (static_cast<int>(o.dims.size()) != spec.num_dims)
    fail(2, "expected " + std::to_string(spec.num_dims) + " dims");
  if (static_cast<int>(o.inputs.size()) != spec.num_inputs)
    fail(2, "expected " + std::to_string(spec.num_inputs) + " inputs");
  for (int64_t d : o.dims)
    if (d < 0) fail(4, "dims must not be negative");
  const int64_t* dims = o.dims.data();
  std::vector<size_t> in_bytes(spec.num_inputs);
  size_t out_bytes = 0;
  if (const char* why = ex.buffer_bytes(dims, in_bytes.data(), &out_bytes)) fail(4, why);
  for (int i = 0; i < spec.num_inputs; ++i)
    if (in_bytes[i] != in.bytes[i])
      fail(3, o.inputs[i] + " does not hold the expected " + std::to_string(in_bytes[i]) +
                  " bytes");
  const int copies = static_cast<int>(in.sets.size());
  std::vector<void*> outputs(copies);
  for (int c = 0; c < copies; ++c) {
    outputs[c] = alloc_bytes(out_bytes);
    std::memset(outputs[c], 0xFF, out_bytes);  // poison: NaN in every float format
  }
  if (th::PrepareFn prepare = ex.prepare()) prepare(dims);

  auto call = [&](int c) {
    ex.kernel(dims, in.sets[c].data(), outputs[c]);
    asm volatile("" : : "r"(outputs[c]) : "memory");  // the result is observed
  };
  call(0);
  write_file(rq.output, outputs[0], out_bytes);

  // warm-up, and calibrate how many back-to-back calls make one sample of >= kMinSampleUs
  const double warmup_s = std::min(o.warmup_s, kMaxWarmupS);
  int next = 0;
  long warm_calls = 0;
  auto warm_start = clock::now();
  double warm_elapsed = 0.0;
  do {
    call(next);
    next = (next + 1) % copies;
    ++warm_calls;
    warm_elapsed = std::chrono::duration<double>(clock::now() - warm_start).count();
  } while (warm_calls < kMinWarmupCalls || warm_elapsed < warmup_s);
  double per_call_us = warm_elapsed * 1e6 / static_cast<double>(warm_calls);
  int calls = 1;
  if (per_call_us < kMinSampleUs)
    calls = static_cast<int>(std::min<double>(
        kMaxCallsPerSample, std::ceil(kMinSampleUs / std::max(per_call_us, 1e-3))));

  std::vector<double> samples;
  bool aborted = false;
  MedianCi ci{0.0, 0.0, 0.0};
  const double cpu_start = cpu_seconds();
  auto bench_start = clock::now();
  auto t1 = bench_start;
  // the CPU clock read where the wall clock stops (t1): the checks after a sample (sorting for
  // the CI) would otherwise count as CPU time outside the wall window, which in a window of a
  // fraction of a millisecond reads as a share well over 1
  double cpu_end = cpu_start;
  while (static_cast<long>(samples.size()) < o.max_reps) {
    auto t0 = clock::now();
    for (int j = 0; j < calls; ++j) {
      call(next);
      next = (next + 1) % copies;
    }
    t1 = clock::now();
    cpu_end = cpu_seconds();
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
    long reps = static_cast<long>(samples.size());
    if (rq.abort_us > 0 && reps >= kFarSlowerReps &&
        *std::min_element(samples.begin(), samples.end()) > kFarSlower * rq.abort_us) {
      aborted = true;
      break;
    }
    // the time cap bounds the floor too: a kernel of tens of milliseconds stops at the cap
    // after kMinRepsAtCap samples, not min reps (such a kernel is rarely a near-tie, and a
    // near-tie is timed again in the engine's confirmation rounds)
    if (reps >= kMinRepsAtCap && reps < o.min_reps &&
        std::chrono::duration<double>(t1 - bench_start).count() >= o.bench_s)
      break;
    if (reps < o.min_reps) continue;
    if (reps < 64 || reps % 16 == 0) {
      ci = median_ci(samples);
      if (rq.abort_us > 0 && ci.low > rq.abort_us) {
        aborted = true;
        break;
      }
      if (o.target_ci > 0 && ci.rel <= o.target_ci) break;
    }
    if (std::chrono::duration<double>(t1 - bench_start).count() >= o.bench_s) break;
  }
  const double cpu_used = cpu_end - cpu_start;
  const double wall = std::chrono::duration<double>(t1 - bench_start).count();
  ci = median_ci(samples);

  std::string json = "{\"samples_us\": [";
  char num[96];
  for (size_t i = 0; i < samples.size(); ++i) {
    std::snprintf(num, sizeof num, i ? ", %.6g" : "%.6g", samples[i]);
    json += num;
  }
  json += std::string("], \"aborted\": ") + (aborted ? "true" : "false");
  json += ", \"calls_per_sample\": " + std::to_string(calls) + ", \"copies\": " +
          std::to_string(copies);
  std::snprintf(num, sizeof num,
                ", \"cpu_seconds\": %.6g, \"wall_seconds\": %.6g, \"median_ci_rel\": %.6g}\n",
                cpu_used, wall, ci.rel);
  json += num;
  FILE* f = std::fopen((rq.output + ".json").c_str(), "w");
  if (f == nullptr || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0)
    fail(3, "cannot write " + rq.output + ".json");
  std::fflush(stderr);
  _exit(0);
}

bool parse_request(char* line, Request& rq) {
  std::vector<std::string> fields;
  std::string field;
  for (char* p = line; *p != '\0' && *p != '\n'; ++p) {
    if (*p == '\t') {
      fields.push_back(field);
      field.clear();
    } else {
      field += *p;
    }
  }
  fields.push_back(field);
  if (fields.size() != 4) return false;
  rq.library = fields[0];
  rq.symbol = fields[1];
  rq.output = fields[2];
  try {
    rq.abort_us = std::stod(fields[3]);
  } catch (const std::logic_error&) {
    return false;
  }
  return !rq.library.empty() && !rq.symbol.empty() && !rq.output.empty();
}

void on_alarm(int) {}  // only interrupts waitpid

int serve(int argc, char** argv) {
  Options o = parse(argc, argv);
  Inputs in = load_inputs(o);
  struct sigaction action {};
  action.sa_handler = on_alarm;  // no SA_RESTART: waitpid returns EINTR at the deadline
  sigaction(SIGALRM, &action, nullptr);
  std::vector<char> line(1 << 16);
  while (std::fgets(line.data(), static_cast<int>(line.size()), stdin) != nullptr) {
    Request rq;
    if (!parse_request(line.data(), rq)) {
      std::printf("{\"exit\": 2}\n");
      std::fflush(stdout);
      continue;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) child(o, in, rq);
    if (pid < 0) fail(6, "fork failed");
    itimerval timer{};
    timer.it_value.tv_sec = static_cast<time_t>(o.run_timeout_s);
    timer.it_value.tv_usec =
        static_cast<suseconds_t>((o.run_timeout_s - double(timer.it_value.tv_sec)) * 1e6);
    setitimer(ITIMER_REAL, &timer, nullptr);
    int status = 0;
    bool timed_out = false;
    while (waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) fail(6, "waitpid failed");
      timed_out = true;
      kill(pid, SIGKILL);
    }
    itimerval off{};
    setitimer(ITIMER_REAL, &off, nullptr);
    if (timed_out) std::printf("{\"timeout\": true}\n");
    else if (WIFSIGNALED(status)) std::printf("{\"signal\": %d}\n", WTERMSIG(status));
    else std::printf("{\"exit\": %d}\n", WEXITSTATUS(status));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return serve(argc, argv); }
