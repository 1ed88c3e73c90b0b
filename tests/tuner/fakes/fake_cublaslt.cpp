// A stand-in for libcublasLt, linked into the GEMM discovery build by
// tests/tuner/test_cublaslt_discovery_fake.py so the enumeration beyond the heuristic runs on a
// machine without a GPU. It keeps each algorithm's attributes in cublasLtMatmulAlgo_t's opaque
// bytes and follows a small, fixed model (see `kIds`, `check` and the heuristic's picks):
//   id 66: the heuristic's algorithm; 40 tiles (TILE_UNDEFINED among them), stages 35/36,
//          split-K with reduction schemes INPLACE|COMPUTE_TYPE, CTA swizzle, custom options 0..7;
//          AlgoCheck refuses tile 209, cluster shape 6 (2x2x1) and split-K 8;
//   id 6:  no tiles or stages listed (so UNDEFINED); runs, but asks for 64 MiB of workspace;
//   id 21: 5000 tiles (more than one id's check budget), stages 1; tiles 4, 8, 12, ... run;
//   id 99: listed by AlgoGetIds, refused by AlgoInit.
#include <cublasLt.h>

#include <cstring>
#include <vector>

namespace {

struct Attrs {
  int32_t id;
  uint32_t tile, stages;
  int32_t splitk;
  uint32_t reduction, swizzle, custom;
  uint16_t inner_shape, cluster_shape;
};
static_assert(sizeof(Attrs) <= sizeof(cublasLtMatmulAlgo_t), "attributes fit the opaque algo");

int g_checks = 0;
int g_context = 0;

Attrs read(const cublasLtMatmulAlgo_t* algo) {
  Attrs a;
  std::memcpy(&a, algo->data, sizeof(a));
  return a;
}

void write(cublasLtMatmulAlgo_t* algo, const Attrs& a) {
  std::memset(algo->data, 0, sizeof(algo->data));
  std::memcpy(algo->data, &a, sizeof(a));
}

std::vector<uint32_t> tiles_of(int32_t id) {
  std::vector<uint32_t> out;
  if (id == 66) {
    out.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    for (uint32_t t = 1; t < 40; ++t) out.push_back(t == 39 ? 209u : t);
  } else if (id == 21) {
    for (uint32_t t = 1; t <= 5000; ++t) out.push_back(t);
  }
  return out;
}

std::vector<uint32_t> stages_of(int32_t id) {
  if (id == 66) return {35, 36};
  if (id == 21) return {1};
  return {};
}

cublasLtMatmulAlgo_t pick(int32_t tile, int32_t splitk, uint32_t reduction, uint32_t custom,
                          uint16_t cluster) {
  cublasLtMatmulAlgo_t algo{};
  write(&algo, Attrs{66, static_cast<uint32_t>(tile), 35, splitk, reduction, 0, custom, 0, cluster});
  return algo;
}

template <typename T>
cublasStatus_t put(const T& value, void* buf, size_t size, size_t* written) {
  if (written != nullptr) *written = sizeof(T);
  if (size == 0) return written == nullptr ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
  if (size != sizeof(T) || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &value, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t put_list(const std::vector<uint32_t>& values, void* buf, size_t size,
                        size_t* written) {
  const size_t bytes = values.size() * sizeof(uint32_t);
  if (size == 0) {
    if (written == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *written = bytes;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr || size < bytes) return CUBLAS_STATUS_INVALID_VALUE;
  if (!values.empty()) std::memcpy(buf, values.data(), bytes);
  if (written != nullptr) *written = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t take(T* field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" int fake_checks() { return g_checks; }

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(&g_context);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t, cudaDataType_t) {
  *desc = new cublasLtMatmulDescOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t,
                                                           cublasLtMatmulDescAttributes_t,
                                                           const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType, uint64_t, uint64_t,
                                                       int64_t) {
  *layout = new cublasLtMatrixLayoutOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

// keeps CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES in the opaque bytes (0: not set)
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t size) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == sizeof(uint64_t)) {
    std::memcpy(&pref->data[0], buf, size);
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

// Three picks of id 66: (tile 24, custom 7, cluster 1x2), (tile 23, custom 4, cluster 2x1),
// (tile 18, split-K 2 with COMPUTE_TYPE reduction, custom 1, cluster 4x1). Under a workspace
// limit of 2 MiB or less: (tile 20, custom 0, cluster 1x1), then tiles 24 and 23 as above.
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t pref,
    int requested, cublasLtMatmulHeuristicResult_t results[], int* count) {
  const std::vector<cublasLtMatmulAlgo_t> picks = {
      pick(24, 1, CUBLASLT_REDUCTION_SCHEME_NONE, 7, CUBLASLT_CLUSTER_SHAPE_1x2x1),
      pick(23, 1, CUBLASLT_REDUCTION_SCHEME_NONE, 4, CUBLASLT_CLUSTER_SHAPE_2x1x1),
      pick(18, 2, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, 1, CUBLASLT_CLUSTER_SHAPE_4x1x1),
  };
  const std::vector<cublasLtMatmulAlgo_t> small_workspace_picks = {
      pick(20, 1, CUBLASLT_REDUCTION_SCHEME_NONE, 0, CUBLASLT_CLUSTER_SHAPE_1x1x1),
      picks[0],
      picks[1],
  };
  const uint64_t limit = pref->data[0];
  const bool small = limit != 0 && limit <= (uint64_t{2} << 20);
  *count = 0;
  for (const cublasLtMatmulAlgo_t& algo : small ? small_workspace_picks : picks) {
    if (*count >= requested) break;
    cublasLtMatmulHeuristicResult_t& r = results[(*count)++];
    r = cublasLtMatmulHeuristicResult_t{};
    r.algo = algo;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.9394f;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetIds(cublasLtHandle_t, cublasComputeType_t,
                                                     cudaDataType_t, cudaDataType_t,
                                                     cudaDataType_t, cudaDataType_t,
                                                     cudaDataType_t, int requested, int ids[],
                                                     int* count) {
  const int kIds[] = {66, 6, 21, 99};
  if (requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  *count = 0;
  for (int id : kIds) {
    if (*count < requested) ids[(*count)++] = id;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoInit(cublasLtHandle_t, cublasComputeType_t,
                                                   cudaDataType_t, cudaDataType_t,
                                                   cudaDataType_t, cudaDataType_t,
                                                   cudaDataType_t, int id,
                                                   cublasLtMatmulAlgo_t* algo) {
  if (id != 66 && id != 6 && id != 21) return CUBLAS_STATUS_NOT_SUPPORTED;
  write(algo, Attrs{id, 0, 0, 1, 0, 0, 0, 0, 0});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoCapGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                              cublasLtMatmulAlgoCapAttributes_t attr,
                                                              void* buf, size_t size,
                                                              size_t* written) {
  const Attrs a = read(algo);
  const bool main = a.id == 66;
  switch (attr) {
    case CUBLASLT_ALGO_CAP_SPLITK_SUPPORT:
      return put<int32_t>(main ? 1 : 0, buf, size, written);
    case CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK:
      return put<uint32_t>(main ? CUBLASLT_REDUCTION_SCHEME_INPLACE |
                                      CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                                : 0u,
                           buf, size, written);
    case CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT:
      return put<uint32_t>(main ? 1u : 0u, buf, size, written);
    case CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX:
      return put<int32_t>(main ? 7 : 0, buf, size, written);
    case CUBLASLT_ALGO_CAP_TILE_IDS:
      return put_list(tiles_of(a.id), buf, size, written);
    case CUBLASLT_ALGO_CAP_STAGES_IDS:
      return put_list(stages_of(a.id), buf, size, written);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
    size_t size, size_t* written) {
  const Attrs a = read(algo);
  switch (attr) {
    case CUBLASLT_ALGO_CONFIG_ID: return put(a.id, buf, size, written);
    case CUBLASLT_ALGO_CONFIG_TILE_ID: return put(a.tile, buf, size, written);
    case CUBLASLT_ALGO_CONFIG_STAGES_ID: return put(a.stages, buf, size, written);
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: return put(a.splitk, buf, size, written);
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME: return put(a.reduction, buf, size, written);
    case CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING: return put(a.swizzle, buf, size, written);
    case CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION: return put(a.custom, buf, size, written);
    case CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID: return put(a.inner_shape, buf, size, written);
    case CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID: return put(a.cluster_shape, buf, size, written);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// Setting refuses a custom option above the algorithm's maximum (as a range check would).
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigSetAttribute(
    cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void* buf,
    size_t size) {
  Attrs a = read(algo);
  cublasStatus_t status = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_ALGO_CONFIG_TILE_ID: status = take(&a.tile, buf, size); break;
    case CUBLASLT_ALGO_CONFIG_STAGES_ID: status = take(&a.stages, buf, size); break;
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: status = take(&a.splitk, buf, size); break;
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME: status = take(&a.reduction, buf, size); break;
    case CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING: status = take(&a.swizzle, buf, size); break;
    case CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION:
      status = take(&a.custom, buf, size);
      if (a.custom > (a.id == 66 ? 7u : 0u)) return CUBLAS_STATUS_INVALID_VALUE;
      break;
    case CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID: status = take(&a.inner_shape, buf, size); break;
    case CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID: status = take(&a.cluster_shape, buf, size); break;
    default: break;
  }
  if (status == CUBLAS_STATUS_SUCCESS) write(algo, a);
  return status;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoCheck(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                                    cublasLtMatrixLayout_t,
                                                    cublasLtMatrixLayout_t,
                                                    cublasLtMatrixLayout_t,
                                                    cublasLtMatrixLayout_t,
                                                    const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulHeuristicResult_t* result) {
  ++g_checks;
  const Attrs a = read(algo);
  *result = cublasLtMatmulHeuristicResult_t{};
  result->wavesCount = 0.25f * static_cast<float>(1 + a.tile % 8) * static_cast<float>(a.splitk);
  if (a.id == 66) {
    if (a.tile == 209 || a.cluster_shape == CUBLASLT_CLUSTER_SHAPE_2x2x1 || a.splitk == 8 ||
        a.tile == CUBLASLT_MATMUL_TILE_UNDEFINED || (a.splitk > 1) != (a.reduction != 0)) {
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    result->workspaceSize = a.splitk > 1 ? (size_t{1} << 20) * static_cast<size_t>(a.splitk) : 0;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a.id == 6) {
    // runs, but wants more workspace than discovery allows
    result->workspaceSize = size_t{64} << 20;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a.id == 21) return a.tile % 4 == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_INVALID_VALUE;
}
