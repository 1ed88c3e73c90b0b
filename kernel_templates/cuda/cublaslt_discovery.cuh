// tunehub: cuBLASLt algorithm discovery beyond the heuristic, shared by the discovery builds
// of gemm_cublaslt.cu.j2 (f16, bf16) and scaled_gemm_cublaslt.cu.j2 (FP8). Included inside the
// including template's anonymous namespace (after <chrono>, <cstdio>, <cstring>, <string> and
// <vector>), once it defines:
//   handle()                 the cublasLtHandle_t (nullptr when cuBLASLt could not start);
//   struct Plan              the shape's descriptors: op (matmul), b, a, d (matrix layouts);
//   kMaxWorkspace            the most workspace a kept algorithm may ask for;
//   kTypeA, kTypeB, kTypeC, kTypeD   the problem's types as cublasLtMatmulAlgoGetIds and
//                            cublasLtMatmulAlgoInit take them (compute CUBLAS_COMPUTE_32F,
//                            scale CUDA_R_32F).
// Its name has no leading "_" on purpose: tuner.render hashes every "_*" file of the folder
// into every CUDA variant's id; the two cuBLASLt templates cover it through their rendered
// source (a Jinja include), and the other ops keep their ids.
// It gives: Config (an algorithm's attributes), pick_of (a heuristic result as a Found),
// Enumerator with vary and enumerate_ids (configurations beyond the picks that
// cublasLtMatmulAlgoCheck accepts), append_item (one JSON answer item) and write_answer
// (the whole answer: the picks, then what enumeration kept).

// Enumeration beyond the heuristic: at most this many cublasLtMatmulAlgoCheck calls in all and
// per algorithm id's tile x stages x cluster grid, this long, this many ids, this many accepted
// configs kept (the tuner ranks them and keeps a few), custom options up to this one.
constexpr int kMaxChecks = 16384;
constexpr auto kMaxEnumerateTime = std::chrono::seconds(5);
constexpr int kMaxChecksPerId = 4096;
constexpr int kMaxIds = 256;
constexpr size_t kMaxEnumerated = 2048;
constexpr int32_t kMaxCustomOption = 15;
constexpr int32_t kSplits[] = {1, 2, 4, 8};
constexpr uint32_t kNoReduction = CUBLASLT_REDUCTION_SCHEME_NONE;
constexpr uint32_t kReductions[] = {CUBLASLT_REDUCTION_SCHEME_INPLACE,
                                    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                    CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE};

// One algorithm's attributes: what a variant's params hold.
struct Config {
  int32_t algo = 0;
  uint32_t tile = 0, stages = 0;
  int32_t splitk = 1;
  uint32_t reduction = 0, swizzle = 0, custom = 0;
  uint16_t inner_shape = 0, cluster_shape = 0;
  bool same(const Config& o) const {
    return algo == o.algo && tile == o.tile && stages == o.stages && splitk == o.splitk &&
           reduction == o.reduction && swizzle == o.swizzle && custom == o.custom &&
           inner_shape == o.inner_shape && cluster_shape == o.cluster_shape;
  }
};

template <typename T>
T config_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written);
  return value;
}

Config read_config(const cublasLtMatmulAlgo_t& algo) {
  Config c;
  c.algo = config_value<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
  c.tile = config_value<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  c.stages = config_value<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  c.splitk = config_value<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  c.reduction = config_value<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  c.swizzle = config_value<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  c.custom = config_value<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  c.inner_shape = config_value<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
  c.cluster_shape = config_value<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  return c;
}

template <typename T>
bool set_value(cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, T value) {
  return cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &value, sizeof(value)) ==
         CUBLAS_STATUS_SUCCESS;
}

// The algorithm built from its attributes alone, as a variant (and a client) builds it; false
// when cuBLASLt refuses the id or any attribute's value.
bool build(const Config& c, cublasLtMatmulAlgo_t* out) {
  if (cublasLtMatmulAlgoInit(handle(), CUBLAS_COMPUTE_32F, CUDA_R_32F, kTypeA, kTypeB, kTypeC,
                             kTypeD, c.algo, out) != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  return set_value(out, CUBLASLT_ALGO_CONFIG_TILE_ID, c.tile) &&
         set_value(out, CUBLASLT_ALGO_CONFIG_STAGES_ID, c.stages) &&
         set_value(out, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c.splitk) &&
         set_value(out, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction) &&
         set_value(out, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c.swizzle) &&
         set_value(out, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c.custom) &&
         set_value(out, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, c.inner_shape) &&
         set_value(out, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c.cluster_shape);
}

template <typename T>
T cap_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  T value{};
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS) {
    return T{};
  }
  return value;
}

// A list capability (tile ids, stages ids): empty when the algorithm has none or cannot say.
std::vector<uint32_t> cap_list(const cublasLtMatmulAlgo_t& algo,
                               cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes < sizeof(uint32_t) || bytes > (size_t{1} << 20)) {
    return {};
  }
  std::vector<uint32_t> out(bytes / sizeof(uint32_t));
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, out.data(), out.size() * sizeof(uint32_t),
                                        &written) != CUBLAS_STATUS_SUCCESS) {
    return {};
  }
  out.resize(written / sizeof(uint32_t));
  return out;
}

struct Found {
  Config config;
  size_t workspace = 0;
  float waves = 0.0f;
  bool exact = true;
  const char* source = "heuristic";
  size_t limit = kMaxWorkspace;  // the workspace limit it was found under (heuristic or check)
};

// A heuristic result as a pick: its attributes, and whether rebuilding the algorithm from them
// alone (as a variant does) gives the same opaque struct.
Found pick_of(const cublasLtMatmulHeuristicResult_t& result, size_t limit) {
  Found pick;
  pick.config = read_config(result.algo);
  cublasLtMatmulAlgo_t rebuilt{};
  pick.exact = build(pick.config, &rebuilt) &&
               std::memcmp(&rebuilt, &result.algo, sizeof(result.algo)) == 0;
  pick.workspace = result.workspaceSize;
  pick.waves = result.wavesCount;
  pick.limit = limit;
  return pick;
}

// Configurations built from attributes and kept when cublasLtMatmulAlgoCheck accepts them for
// this shape (within kMaxWorkspace) and they are none of the heuristic's picks; bounded by
// kMaxChecks and kMaxEnumerated.
class Enumerator {
 public:
  Enumerator(const Plan& p, const std::vector<Found>& picks)
      : plan_(p), picks_(picks), deadline_(std::chrono::steady_clock::now() + kMaxEnumerateTime) {}

  // false once the budget is spent (the caller stops)
  bool check(const Config& c) {
    if (checks_ >= kMaxChecks || kept_.size() >= kMaxEnumerated ||
        std::chrono::steady_clock::now() > deadline_) {
      return false;
    }
    for (const Found& f : picks_) {
      if (f.config.same(c)) return true;
    }
    for (const Found& f : kept_) {
      if (f.config.same(c)) return true;
    }
    ++checks_;
    cublasLtMatmulAlgo_t algo{};
    if (!build(c, &algo)) return true;
    cublasLtMatmulHeuristicResult_t result{};
    if (cublasLtMatmulAlgoCheck(handle(), plan_.op, plan_.b, plan_.a, plan_.d, plan_.d, &algo,
                                &result) != CUBLAS_STATUS_SUCCESS ||
        result.workspaceSize > kMaxWorkspace) {
      return true;
    }
    kept_.push_back(Found{c, result.workspaceSize, result.wavesCount, true, "enumerated"});
    return true;
  }

  int checks() const { return checks_; }
  const std::vector<Found>& kept() const { return kept_; }

 private:
  const Plan& plan_;
  const std::vector<Found>& picks_;
  std::chrono::steady_clock::time_point deadline_;
  int checks_ = 0;
  std::vector<Found> kept_;
};

// The knobs of one heuristic pick varied one at a time: split-K 1/2/4/8 with each reduction
// scheme the algorithm supports, CTA swizzle flipped, every other custom option.
void vary(const Config& pick, Enumerator* e) {
  cublasLtMatmulAlgo_t algo{};
  if (!build(pick, &algo)) return;
  if (cap_value<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0) {
    const uint32_t mask = cap_value<uint32_t>(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    for (int32_t splits : kSplits) {
      for (uint32_t reduction : kReductions) {
        Config c = pick;
        c.splitk = splits;
        c.reduction = splits == 1 ? kNoReduction : reduction;
        if (splits > 1 && (mask & reduction) == 0) continue;
        if (!c.same(pick) && !e->check(c)) return;
        if (splits == 1) break;  // one reduction scheme: none
      }
    }
  }
  if (cap_value<uint32_t>(algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) != 0) {
    Config c = pick;
    c.swizzle = pick.swizzle == 0 ? 1u : 0u;
    if (!e->check(c)) return;
  }
  int32_t custom_max = cap_value<int32_t>(algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
  if (custom_max > kMaxCustomOption) custom_max = kMaxCustomOption;
  for (int32_t option = 0; option <= custom_max; ++option) {
    Config c = pick;
    c.custom = static_cast<uint32_t>(option);
    if (!c.same(pick) && !e->check(c)) return;
  }
}

void add_unique(std::vector<uint32_t>* values, uint32_t value) {
  for (uint32_t v : *values) {
    if (v == value) return;
  }
  values->push_back(value);
}

// One algorithm id's tiles x stages x cluster shapes, at most kMaxChecksPerId checks; false
// once the whole budget is spent.
bool enumerate_grid(int32_t id, const std::vector<uint32_t>& tiles,
                    const std::vector<uint32_t>& stages, const std::vector<uint32_t>& clusters,
                    Enumerator* e) {
  const int end = e->checks() + kMaxChecksPerId;
  for (uint32_t tile : tiles) {
    for (uint32_t stage : stages) {
      for (uint32_t cluster : clusters) {
        if (e->checks() >= end) return true;
        Config c;
        c.algo = id;
        c.tile = tile;
        c.stages = stage;
        c.cluster_shape = static_cast<uint16_t>(cluster);
        if (!e->check(c)) return false;
      }
    }
  }
  return true;
}

// Every algorithm id of the problem's types (cublasLtMatmulAlgoGetIds): its tiles x stages x
// cluster shapes, no split-K, no swizzle, custom option 0 (the knobs are what `vary` explores
// around the heuristic's picks). For an id the heuristic picked, the stages it picked (of those
// the id lists) and its cluster shapes besides automatic, so every tile fits in the budget;
// for another, all its stages and the automatic cluster shape. The picks' tiles go first, so
// the per-id budget cuts other tiles.
void enumerate_ids(const std::vector<Found>& picks, Enumerator* e) {
  std::vector<int> ids(kMaxIds);
  int count = 0;
  if (cublasLtMatmulAlgoGetIds(handle(), CUBLAS_COMPUTE_32F, CUDA_R_32F, kTypeA, kTypeB, kTypeC,
                               kTypeD, kMaxIds, ids.data(), &count) != CUBLAS_STATUS_SUCCESS) {
    return;
  }
  for (int i = 0; i < count && i < kMaxIds; ++i) {
    cublasLtMatmulAlgo_t algo{};
    if (cublasLtMatmulAlgoInit(handle(), CUBLAS_COMPUTE_32F, CUDA_R_32F, kTypeA, kTypeB, kTypeC,
                               kTypeD, ids[i], &algo) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    std::vector<uint32_t> tiles = cap_list(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
    std::vector<uint32_t> stages = cap_list(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    if (stages.empty()) stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
    std::vector<uint32_t> picked_stages, picked_tiles;
    std::vector<uint32_t> clusters = {CUBLASLT_CLUSTER_SHAPE_AUTO};
    for (const Found& pick : picks) {
      if (pick.config.algo != ids[i]) continue;
      add_unique(&clusters, pick.config.cluster_shape);
      for (uint32_t stage : stages) {
        if (stage == pick.config.stages) add_unique(&picked_stages, stage);
      }
      for (uint32_t tile : tiles) {
        if (tile == pick.config.tile) add_unique(&picked_tiles, tile);
      }
    }
    if (!picked_stages.empty()) stages = picked_stages;
    for (uint32_t tile : tiles) add_unique(&picked_tiles, tile);  // the picks' tiles first
    tiles = picked_tiles;
    if (!enumerate_grid(ids[i], tiles, stages, clusters, e)) return;
  }
}

// Appends one answer item; false (nothing appended) when it would not fit in `limit` bytes.
bool append_item(std::string* json, const Found& f, size_t limit) {
  char item[512];
  const Config& c = f.config;
  const float waves = f.waves;
  std::snprintf(item, sizeof(item),
                "%s{\"algo\":%d,\"tile\":%u,\"stages\":%u,\"splitk\":%d,\"reduction\":%u,"
                "\"swizzle\":%u,\"custom\":%u,\"inner_shape\":%u,\"cluster_shape\":%u,"
                "\"workspace\":%zu,\"waves\":%.4f,\"workspace_limit\":%zu,\"exact\":%s,"
                "\"source\":\"%s\"}",
                json->size() > 1 ? "," : "", c.algo, c.tile, c.stages, c.splitk, c.reduction,
                c.swizzle, c.custom, static_cast<unsigned>(c.inner_shape),
                static_cast<unsigned>(c.cluster_shape), f.workspace,
                waves == waves && waves < 1e30f ? static_cast<double>(waves) : 0.0, f.limit,
                f.exact ? "true" : "false", f.source);
  // room for this item, the closing bracket and the terminating zero
  if (json->size() + std::strlen(item) + 2 > limit) return false;
  *json += item;
  return true;
}


// Enumerates beyond `picks` (distinct, best first) for shape `p` and writes into buf the JSON
// list of the picks ("source":"heuristic"), then of the enumerated configurations
// ("source":"enumerated", as many as fit). The count of items, or -1000 when the picks alone do
// not fit. Enumeration never fails discovery: what cuBLASLt refuses is left out.
int write_answer(const Plan& p, const std::vector<Found>& picks, char* buf, size_t buf_bytes) {
  Enumerator enumerator(p, picks);
  for (const Found& pick : picks) vary(pick.config, &enumerator);
  enumerate_ids(picks, &enumerator);
  std::string json = "[";
  int written = 0;
  for (const Found& pick : picks) {
    if (!append_item(&json, pick, buf_bytes)) return -1000;
    ++written;
  }
  for (const Found& extra : enumerator.kept()) {
    if (!append_item(&json, extra, buf_bytes)) break;
    ++written;
  }
  json += "]";
  std::memcpy(buf, json.c_str(), json.size() + 1);
  return written;
}
