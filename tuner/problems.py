"""Typed problems: one frozen dataclass per op, with the dims that define a shape.

Dims are validated here once (positive ints under a documented limit), so that everything
downstream (templates, keys, the database) only ever sees validated values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from tuner.epilogues import EPILOGUES_OF_OP, NONE, output_columns
from tuner.errors import InvalidRequestError
from tuner.moe import MAX_EXPERTS, SKEWS, token_counts, tokens_bucket

__all__ = [
    "Op",
    "DType",
    "ReduceKind",
    "OPS",
    "DTYPES",
    "LAYOUTS",
    "MAX_DIM",
    "MAX_ELEMENTS",
    "Problem",
    "GemmProblem",
    "Conv2dProblem",
    "RowsProblem",
    "ReduceProblem",
    "SoftmaxProblem",
    "RmsNormProblem",
    "ScaledGemmProblem",
    "SCALED_GEMM_OUT_DTYPES",
    "SCALINGS",
    "SCALE_BLOCK",
    "FP8_K_ALIGN",
    "OP_DTYPES",
    "op_dtypes",
    "check_op_dtype",
    "problem_from_dict",
    "PROBLEM_TYPES",
    "problem_epilogue",
    "GroupedGemmProblem",
    "GROUPED_FP8_OUT_DTYPE",
    "check_problem_dtype",
]

Op = Literal["gemm", "conv2d", "reduce", "softmax", "rms_norm", "scaled_gemm", "grouped_gemm"]
#: e4m3 (FP8) is an input dtype of scaled_gemm and grouped_gemm alone (``OP_DTYPES``)
DType = Literal["f16", "bf16", "f32", "e4m3"]
ReduceKind = Literal["sum", "max", "mean"]
OPS: tuple[str, ...] = get_args(Op)
DTYPES: tuple[str, ...] = get_args(DType)
#: layouts per op; the first one is the default
LAYOUTS: dict[str, tuple[str, ...]] = {
    "gemm": ("rcr", "rrr", "crr", "ccr"),
    "conv2d": ("nhwc",),
    "reduce": ("row",),
    "softmax": ("row",),
    "rms_norm": ("row",),
    "scaled_gemm": ("rcr",),
    #: tokens A [tokens, k] row-major, weights W [experts, n, k] (each expert's as torch's
    #: Linear stores it), C [tokens, n] row-major
    "grouped_gemm": ("rcr",),
}
#: the request dtypes each op takes (an op not named takes f16, bf16 and f32); scaled_gemm's
#: dtype is its inputs' (FP8 e4m3), its output dtype is the problem's ``out_dtype``;
#: grouped_gemm e4m3 is FP8 with rowwise scales and a bf16 output (``tuner.fp8_grouped``)
OP_DTYPES: dict[str, tuple[str, ...]] = {
    "scaled_gemm": ("e4m3",),
    "grouped_gemm": ("bf16", "f16", "e4m3"),
}
_PLAIN_DTYPES = ("f16", "bf16", "f32")


def op_dtypes(op: str) -> tuple[str, ...]:
    """The request dtypes ``op`` takes."""
    return OP_DTYPES.get(op, _PLAIN_DTYPES)


def check_op_dtype(op: str, dtype: str) -> str:
    """``dtype`` when ``op`` takes it, else InvalidRequestError naming ``dtype``."""
    allowed = op_dtypes(op)
    if dtype not in allowed:
        raise InvalidRequestError(
            "dtype", f"op {op} takes dtype {' or '.join(allowed)}, not {dtype!r}"
        )
    return dtype


#: no single dim may exceed this (2^24): keeps int32 index math in kernels safe per dim
MAX_DIM = 1 << 24
#: no operand may hold more elements than this (2^31 - 1): kernels index with int64 above it
MAX_ELEMENTS = (1 << 31) - 1


def _check_dim(name: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(name, f"must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidRequestError(name, f"must be >= {minimum}, got {value}")
    if value > MAX_DIM:
        raise InvalidRequestError(name, f"must be <= {MAX_DIM}, got {value}")
    return value


def _check_multiple(problem: object, names: tuple[str, ...], factor: int, why: str) -> None:
    """InvalidRequestError naming the first of ``names`` whose value is not a multiple of
    ``factor`` ("must be a multiple of {factor} {why}, got {value}")."""
    for name in names:
        value = getattr(problem, name)
        if value % factor:
            raise InvalidRequestError(name, f"must be a multiple of {factor} {why}, got {value}")


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    # dataclasses.fields() rebuilds its tuple on every call: a third of the lookup batch's
    # per-problem Python work went there (docs/benchmarks/load.md)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


@dataclass(frozen=True)
class Problem:
    """Base of the per-op problems. ``key()`` is the canonical text the database indexes."""

    op: ClassVar[str]
    #: names of the int dims, in canonical order
    dim_names: ClassVar[tuple[str, ...]]

    def __post_init__(self) -> None:
        for name in self.dim_names:
            _check_dim(name, getattr(self, name), minimum=self._minimum(name))
        for name, count in self.operand_sizes().items():
            if count > MAX_ELEMENTS:
                raise InvalidRequestError(
                    name, f"holds {count} elements, over the limit of {MAX_ELEMENTS}"
                )

    @staticmethod
    def _minimum(name: str) -> int:
        return 1

    def dims(self) -> dict[str, Any]:
        """Every field, ints and enums, in canonical order."""
        return {name: getattr(self, name) for name in _field_names(type(self))}

    def int_dims(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.dim_names}

    def key(self) -> str:
        """Canonical text of the problem, e.g. ``m=128,n=4096,k=4096``."""
        return ",".join(f"{k}={v}" for k, v in self.dims().items())

    def operand_sizes(self) -> dict[str, int]:
        """Elements per operand, for limits and bandwidth figures."""
        raise NotImplementedError

    def flops(self) -> float:
        """Useful floating-point operations (0 for memory-bound ops)."""
        return 0.0

    def bytes_moved(self, element_size: int) -> float:
        """Minimal bytes read plus written, for a bandwidth figure."""
        return float(sum(self.operand_sizes().values()) * element_size)

    def reduction_length(self) -> int:
        """Terms one output element accumulates (it scales the verification tolerance)."""
        return int(getattr(self, "k", 1))


@dataclass(frozen=True)
class GemmProblem(Problem):
    """C[m, n] = A[m, k] @ B[k, n]."""

    op: ClassVar[str] = "gemm"
    dim_names: ClassVar[tuple[str, ...]] = ("m", "n", "k")
    m: int
    n: int
    k: int
    #: the fused epilogue (``tuner.epilogues``); left out of ``dims()`` and the key when none
    epilogue: str = NONE

    def __post_init__(self) -> None:
        _check_epilogue(self)
        super().__post_init__()
        if self.epilogue == "gated_silu" and self.n % 2:
            raise InvalidRequestError(
                "n", f"gated_silu splits n into gate and up halves: n must be even, got {self.n}"
            )

    def dims(self) -> dict[str, Any]:
        return _without_none_epilogue(super().dims())

    def operand_sizes(self) -> dict[str, int]:
        c = self.m * output_columns(self.epilogue, self.n)
        sizes = {"a": self.m * self.k, "b": self.k * self.n, "c": c}
        return sizes if self.epilogue == NONE else {**sizes, "bias": self.n}

    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


@dataclass(frozen=True)
class Conv2dProblem(Problem):
    """Forward convolution, NHWC input [n,h,w,c], KRSC filter [k,r,s,c], NPQK output."""

    op: ClassVar[str] = "conv2d"
    dim_names: ClassVar[tuple[str, ...]] = (
        "n",
        "h",
        "w",
        "c",
        "k",
        "r",
        "s",
        "stride",
        "pad",
        "dilation",
    )
    n: int
    h: int
    w: int
    c: int
    k: int
    r: int
    s: int
    stride: int = 1
    pad: int = 0
    dilation: int = 1
    #: the fused epilogue (``tuner.epilogues``); left out of ``dims()`` and the key when none
    epilogue: str = NONE

    @staticmethod
    def _minimum(name: str) -> int:
        return 0 if name == "pad" else 1

    def dims(self) -> dict[str, Any]:
        return _without_none_epilogue(super().dims())

    def __post_init__(self) -> None:
        _check_epilogue(self)
        super().__post_init__()
        if self.p < 1 or self.q < 1:
            raise InvalidRequestError(
                "r", "filter (with dilation) is larger than the padded input: empty output"
            )

    @property
    def p(self) -> int:
        return (self.h + 2 * self.pad - self.dilation * (self.r - 1) - 1) // self.stride + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.pad - self.dilation * (self.s - 1) - 1) // self.stride + 1

    def operand_sizes(self) -> dict[str, int]:
        # p/q may be <1 before validation finishes; clamp so the size check runs first
        p, q = max(self.p, 0), max(self.q, 0)
        sizes = {
            "x": self.n * self.h * self.w * self.c,
            "w": self.k * self.r * self.s * self.c,
            "y": self.n * p * q * self.k,
        }
        return sizes if self.epilogue == NONE else {**sizes, "bias": self.k}

    def flops(self) -> float:
        return 2.0 * self.n * self.p * self.q * self.k * self.r * self.s * self.c

    def reduction_length(self) -> int:
        return self.r * self.s * self.c


@dataclass(frozen=True)
class RowsProblem(Problem):
    """Base of the ops over the rows of x[m, k] (reduce, softmax, rms_norm): each row of k
    elements is one unit of work."""

    dim_names: ClassVar[tuple[str, ...]] = ("m", "k")
    m: int
    k: int


@dataclass(frozen=True)
class ReduceProblem(RowsProblem):
    """y[m] = reduce(x[m, k]) over the last dim; ``kind`` is sum, max or mean."""

    op: ClassVar[str] = "reduce"
    kind: str = "sum"

    def __post_init__(self) -> None:
        if self.kind not in get_args(ReduceKind):
            raise InvalidRequestError("kind", f"must be one of {get_args(ReduceKind)}")
        super().__post_init__()

    def operand_sizes(self) -> dict[str, int]:
        return {"x": self.m * self.k, "y": self.m}


@dataclass(frozen=True)
class SoftmaxProblem(RowsProblem):
    """y[m, k] = softmax(x[m, k]) over the last dim."""

    op: ClassVar[str] = "softmax"

    def operand_sizes(self) -> dict[str, int]:
        return {"x": self.m * self.k, "y": self.m * self.k}


@dataclass(frozen=True)
class RmsNormProblem(RowsProblem):
    """y[m, k] = w[k] * (x[m, k] * rsqrt(mean_k(x[m, k]^2) + eps)), as Hugging Face's Llama,
    Mistral and Qwen2 RMSNorm computes it: accumulated in f32, rounded once to the storage
    dtype. Inputs x [m, k] and w [k], output y [m, k]. ``eps`` is a run-time value of the
    kernel (``tuner.abi``), not part of the problem: it does not change the speed."""

    op: ClassVar[str] = "rms_norm"

    def operand_sizes(self) -> dict[str, int]:
        return {"x": self.m * self.k, "w": self.k, "y": self.m * self.k}

    def reduction_length(self) -> int:
        """1: an output is one product w * x * scale, rounded once. The row's scale sums k
        positive squares in f32 over short chains (the CUDA kernels' lanes, the CPU kernel's
        chunks of 2048), whose relative error stays under every storage dtype's tolerance
        (1e-4 and up); a tolerance grown with k would pass a kernel that drops one lane's
        share of the sum (a single f32 chain over 2^20 squares is 2e-4 off: not accepted)."""
        return 1


@dataclass(frozen=True)
class GroupedGemmProblem(Problem):
    """Mixture-of-experts grouped GEMM: C_e[m_e, n] = A_e[m_e, k] @ W_e[n, k]^T per expert.

    The tokens per expert are not in the key: ``tokens`` (their total, rounded up to a power
    of two here) and ``skew`` (max / mean, one of ``tuner.moe.SKEWS``) name a bucket, and
    ``tuner.moe.token_counts`` is the bucket's benchmark distribution. n and k must be
    multiples of 8 (16-byte rows for TMA and vector loads); with dtype e4m3 (FP8, rowwise
    scales, bf16 output: ``tuner.fp8_grouped``) multiples of 16, which needs the request's
    dtype and so is checked by :func:`check_problem_dtype`. The dtype is not in the key (the
    request names it beside the problem): bf16, f16 and e4m3 problems share their keys."""

    op: ClassVar[str] = "grouped_gemm"
    dim_names: ClassVar[tuple[str, ...]] = ("experts", "n", "k", "tokens", "skew")
    experts: int
    n: int
    k: int
    tokens: int
    skew: int = 1

    def __post_init__(self) -> None:
        for name in self.dim_names:  # types and ranges first: the checks below read them
            _check_dim(name, getattr(self, name))
        if self.experts > MAX_EXPERTS:
            raise InvalidRequestError("experts", f"must be <= {MAX_EXPERTS}, got {self.experts}")
        _check_multiple(self, ("n", "k"), 8, "(16-byte aligned rows)")
        if self.skew not in SKEWS:
            raise InvalidRequestError("skew", f"must be one of {SKEWS}, got {self.skew}")
        if self.skew > self.experts:
            raise InvalidRequestError(
                "skew", f"max/mean cannot exceed the {self.experts} experts, got {self.skew}"
            )
        object.__setattr__(self, "tokens", tokens_bucket(self.tokens))  # the bucket
        super().__post_init__()  # operand sizes, of the bucket

    def operand_sizes(self) -> dict[str, int]:
        """W counts the experts the bucket's distribution gives tokens: the others' weights
        are never read (decode routes fewer tokens than there are experts)."""
        active = sum(1 for m in token_counts(self.experts, self.tokens, self.skew) if m)
        return {
            "a": self.tokens * self.k,
            "w": active * self.n * self.k,
            "c": self.tokens * self.n,
        }

    def flops(self) -> float:
        return 2.0 * self.tokens * self.n * self.k

    def bytes_moved(self, element_size: int) -> float:
        """A, the active experts' W and C in ``element_size`` bytes; with 1-byte (e4m3) inputs
        C is bf16 (2 bytes) and the f32 rowwise scales count too (one per token row, one per
        active expert's output column)."""
        sizes = self.operand_sizes()
        if element_size != 1:
            return float(sum(sizes.values()) * element_size)
        scales = 4 * (self.tokens + sizes["w"] // self.k)
        return float(sizes["a"] + sizes["w"] + _GROUPED_FP8_OUT_BYTES * sizes["c"] + scales)


def _check_epilogue(problem: Problem) -> None:
    epilogue = getattr(problem, "epilogue", NONE)
    allowed = EPILOGUES_OF_OP[problem.op]
    if not isinstance(epilogue, str) or epilogue not in allowed:
        raise InvalidRequestError(
            "epilogue", f"{problem.op} takes one of {allowed}, not {epilogue!r}"
        )


def _without_none_epilogue(dims: dict[str, Any]) -> dict[str, Any]:
    # an unfused problem keeps the dims, key and ids it had before epilogues existed
    if dims.get("epilogue") == NONE:
        del dims["epilogue"]
    return dims


def problem_epilogue(problem: Problem) -> str:
    """The epilogue ``problem`` fuses (``none`` for ops without one)."""
    return str(getattr(problem, "epilogue", NONE))


#: scaled_gemm's output dtypes and scalings (tuner.fp8 documents the scale layouts)
SCALED_GEMM_OUT_DTYPES = ("bf16", "f16")
SCALINGS = ("per_tensor", "block")
#: block scaling's block edge (B per 128x128, A per 1x128 along K)
SCALE_BLOCK = 128
#: FP8 rows must hold whole 16-byte vectors (TMA and vector loads): k a multiple of 16
FP8_K_ALIGN = 16


@dataclass(frozen=True)
class ScaledGemmProblem(Problem):
    """D[m, n] = (sa * A[m, k]) @ (sb * B[n, k])^T, A and B FP8 e4m3 (A activations row-major,
    B weights stored [n, k]: layout rcr), f32 accumulate, D in ``out_dtype`` (bf16 or f16).

    ``scaling`` ``per_tensor``: one f32 scale for A and one for B. ``block`` (DeepSeek-style):
    A one f32 scale per 1x128 along K, B one per 128x128 block, so k and n must be multiples of
    128. k must be a multiple of 16 either way (FP8 rows in 16-byte vectors)."""

    op: ClassVar[str] = "scaled_gemm"
    dim_names: ClassVar[tuple[str, ...]] = ("m", "n", "k")
    m: int
    n: int
    k: int
    out_dtype: str = "bf16"
    scaling: str = "per_tensor"

    def __post_init__(self) -> None:
        if self.out_dtype not in SCALED_GEMM_OUT_DTYPES:
            raise InvalidRequestError(
                "out_dtype", f"must be one of {SCALED_GEMM_OUT_DTYPES}, not {self.out_dtype!r}"
            )
        if self.scaling not in SCALINGS:
            raise InvalidRequestError("scaling", f"must be one of {SCALINGS}, not {self.scaling!r}")
        super().__post_init__()
        _check_multiple(self, ("k",), FP8_K_ALIGN, "(FP8 rows in 16-byte vectors)")
        if self.scaling == "block":
            why = "with block scaling (128x128 weight blocks)"
            _check_multiple(self, ("k", "n"), SCALE_BLOCK, why)

    def operand_sizes(self) -> dict[str, int]:
        return {"a": self.m * self.k, "b": self.n * self.k, "c": self.m * self.n}

    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def bytes_moved(self, element_size: int) -> float:
        """FP8 inputs (1 byte), the output in ``out_dtype`` (2 bytes); ``element_size`` is
        ignored: the op's bytes are fixed by its types."""
        return float(self.m * self.k + self.n * self.k + 2 * self.m * self.n)


#: grouped_gemm e4m3's output dtype (inputs FP8 e4m3, rowwise scales: tuner.fp8_grouped)
GROUPED_FP8_OUT_DTYPE = "bf16"
_GROUPED_FP8_OUT_BYTES = 2


def check_problem_dtype(problem: Problem, dtype: str) -> Problem:
    """``problem`` when it can be computed in ``dtype``, else InvalidRequestError naming the
    dim: grouped_gemm e4m3 needs n and k in whole 16-byte FP8 rows (multiples of
    :data:`FP8_K_ALIGN`). The rules of a dtype that the problem alone cannot check live here;
    the dtype itself is checked by :func:`check_op_dtype`."""
    if isinstance(problem, GroupedGemmProblem) and dtype == "e4m3":
        why = "with dtype e4m3 (FP8 rows in 16-byte vectors)"
        _check_multiple(problem, ("n", "k"), FP8_K_ALIGN, why)
    return problem


PROBLEM_TYPES: dict[str, type[Problem]] = {
    cls.op: cls
    for cls in (
        GemmProblem,
        Conv2dProblem,
        ReduceProblem,
        SoftmaxProblem,
        RmsNormProblem,
        ScaledGemmProblem,
        GroupedGemmProblem,
    )
}


def problem_from_dict(op: str, fields: dict[str, Any], dtype: str | None = None) -> Problem:
    """Build the problem of ``op`` from a plain dict; unknown or missing fields are errors.
    With ``dtype``, the problem is also checked against it (:func:`check_problem_dtype`)."""
    if dtype is not None:
        return check_problem_dtype(problem_from_dict(op, fields), dtype)
    cls = PROBLEM_TYPES.get(op)
    if cls is None:
        raise InvalidRequestError("op", f"unknown op {op!r}; one of {OPS}")
    known = set(_field_names(cls))
    extra = sorted(set(fields) - known)
    if extra:
        raise InvalidRequestError(extra[0], f"unknown field for op {op}")
    try:
        return cls(**fields)
    except TypeError as exc:  # a missing required dim: named, as any other field
        for field in dataclasses.fields(cls):
            required = field.default is dataclasses.MISSING
            if (
                required
                and field.default_factory is dataclasses.MISSING
                and field.name not in fields
            ):
                raise InvalidRequestError(field.name, f"required for op {op}") from None
        raise InvalidRequestError("problems", str(exc)) from None
