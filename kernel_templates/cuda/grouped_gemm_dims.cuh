// tunehub grouped GEMM (mixture of experts): the ABI dims shared by every grouped template.
//
// Pulled in with a Jinja include of "cuda/grouped_gemm_dims.cuh" after _tunehub_abi.cuh (keep
// Jinja syntax out of this file). Its name has no leading "_" on purpose: tuner.render hashes
// every "_*" file of the folder into every CUDA variant's id, and a helper of one op must not
// re-key the others (the grouped variants' ids cover it through their rendered source). Dims (tuner/abi.py): [experts, n, k, tokens, skew,
// m_0 .. m_{experts-1}]; inputs A [tokens, k] row-major, the rows of expert e stacked after
// those of experts < e, and W [experts, n, k] (each expert's weight as torch's Linear stores
// it); output D [tokens, n] row-major, D_e = A_e @ W_e^T. Rows of D past sum(m_e) are not
// written. Experts without tokens are left out of the group list (no work, no launch).
#ifndef TUNEHUB_GROUPED_GEMM_CUH
#define TUNEHUB_GROUPED_GEMM_CUH

namespace tunehub {

constexpr int kMaxExperts = 256;

// The non-empty experts of one call, in expert order: group g is expert expert[g], its rows
// of A and D are [start[g], start[g + 1]). Passed by value to kernels (about 2.6 KB).
struct GroupList {
  int n;
  int k;
  int groups;
  int start[kMaxExperts + 1];
  short expert[kMaxExperts];
};

// Reads and checks the dims (TUNEHUB_OK or the reason) into `list`.
inline int read_group_dims(const int64_t* dims, int n_dims, GroupList* list) {
  if (dims == nullptr || n_dims < 6) return TUNEHUB_BAD_DIMS;
  const int64_t experts = dims[0], n = dims[1], k = dims[2], tokens = dims[3];
  if (experts < 1 || experts > kMaxExperts || n_dims != 5 + experts) return TUNEHUB_BAD_DIMS;
  if (n < 1 || k < 1 || tokens < 1 || n > (int64_t{1} << 24) || k > (int64_t{1} << 24) ||
      tokens > (int64_t{1} << 24)) {
    return TUNEHUB_BAD_DIMS;
  }
  if (n % 8 != 0 || k % 8 != 0) return TUNEHUB_MISALIGNED;
  if (tokens * n > (int64_t{1} << 31) - 1 || tokens * k > (int64_t{1} << 31) - 1 ||
      experts * n * k > (int64_t{1} << 40)) {
    return TUNEHUB_TOO_LARGE;
  }
  list->n = static_cast<int>(n);
  list->k = static_cast<int>(k);
  list->groups = 0;
  int64_t row = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t m = dims[5 + e];
    if (m < 0) return TUNEHUB_BAD_DIMS;
    if (m == 0) continue;
    list->start[list->groups] = static_cast<int>(row);
    list->expert[list->groups] = static_cast<short>(e);
    ++list->groups;
    row += m;
    if (row > tokens) return TUNEHUB_BAD_DIMS;  // more rows than A holds
  }
  list->start[list->groups] = static_cast<int>(row);
  return TUNEHUB_OK;
}

}  // namespace tunehub

#endif  // TUNEHUB_GROUPED_GEMM_CUH
