"""Typed values that cross the engine's boundary: requests in, results out.

The service builds a :class:`TuneRequest`, the engine returns one :class:`ProblemResult` per
problem. Nothing here touches the database or the network.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

from tuner.problems import Problem
from tuner.winner import TIE_BAND

__all__ = [
    "Objective",
    "Outcome",
    "Budget",
    "EngineConfig",
    "TuneRequest",
    "DeviceInfo",
    "Toolchain",
    "Variant",
    "CompileResult",
    "Timing",
    "BenchResult",
    "Trial",
    "ProblemResult",
    "ABI_VERSION",
    "BuildRecord",
    "BuiltArtifact",
]


#: what a tuning job minimises: the median time, or the energy per launch (needs a counter)
Objective = Literal["time", "energy"]


class Outcome(enum.StrEnum):
    """What happened to one variant on one problem. Only ``ok`` may win."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    #: timing stopped early: clearly slower than the best so far (its partial time is kept)
    ABORTED_SLOW = "aborted_slow"
    #: the space's constraints rule it out for this problem (never compiled)
    PRUNED = "pruned"


@dataclass(frozen=True)
class Budget:
    """Limits of one problem's search; ``None`` means no limit."""

    max_variants: int | None = None
    max_seconds: float | None = None


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs from its host; built from the service's settings.

    The engine never reads the environment: whoever calls it decides these.
    """

    cache_dir: str
    #: parallel compiles; 0 means one per core
    compile_workers: int = 0
    compile_timeout_s: float = 120.0
    #: one variant's run (verify + time) may take this long before it counts as a hang
    run_timeout_s: float = 60.0
    #: measurement time per variant (after warm-up)
    bench_seconds: float = 0.2
    warmup_seconds: float = 0.05
    min_reps: int = 5
    max_reps: int = 10_000
    #: the CPU backend's cap on samples (besides ``bench_seconds``): a CPU kernel of
    #: milliseconds on a shared host drifts more between samples than 24 of them resolve,
    #: so more samples buy time, not accuracy; near-ties are then timed again side by side
    cpu_max_reps: int = 24
    #: adaptive timing: stop once the 95% confidence interval of the median is within this
    #: fraction of it (after ``min_reps``; ``bench_seconds`` and ``max_reps`` cap it); 0: off
    target_ci: float = 0.01
    #: a measurement whose process CPU time is below this share of its wall time was taken
    #: while another process held the core: it is flagged suspect and re-measured
    min_cpu_share: float = 0.9
    #: re-measurements of a suspect contender before its best try is kept (still suspect)
    remeasure_tries: int = 3
    #: confirmation: the verified results within ``confirm_band`` of the fastest (at most
    #: ``confirm_max`` of them) are timed again in ``confirm_rounds`` interleaved rounds, so
    #: that near-ties are decided side by side, not minutes apart on a drifting machine
    #: (a shared host drifts by 10-20% over seconds: the band covers that drift, and results
    #: stopped early as slower count when their partial median is inside it). The rounds'
    #: spread is the tie band of tuner.winner (at least winner.MIN_ROUNDS of them; five give
    #: Student's t 2.78 on 4 degrees of freedom where three would give 4.30)
    confirm_rounds: int = 5
    confirm_band: float = 0.15
    confirm_max: int = 6
    #: the narrowest tie band (tuner.winner: the rounds' intervals widen it; without rounds
    #: it is the whole band inside which two medians are a tie)
    tie_band: float = TIE_BAND
    #: stop timing a candidate early once its median is this many times the best so far
    #: (backends whose early stop tests a confidence interval use the tie band instead)
    abort_slower_than: float = 3.0
    #: compile cache size bound in bytes (least recently used artifacts are evicted)
    cache_max_bytes: int = 2 << 30
    #: extra include dirs for templates that need them (CUTLASS headers)
    include_dirs: tuple[str, ...] = ()
    #: CUDA: which GPU (index as CUDA_VISIBLE_DEVICES sees it)
    device_index: int = 0
    seed: int = 0


@dataclass(frozen=True)
class TuneRequest:
    """One tuning task: a problem of one op/dtype/layout on one backend."""

    op: str
    dtype: str
    layout: str
    problem: Problem
    backend: str = "cpu"
    strategy: str = "exhaustive"
    budget: Budget = field(default_factory=Budget)
    objective: Objective = "time"
    seed: int = 0
    #: variant names of the stored winner(s) of this problem: the engine times them without
    #: an early stop and always again in the confirmation rounds, so the store judges the
    #: incumbent against the new winner side by side (tuner.winner.confidently_faster)
    incumbents: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceInfo:
    """The device key (backend, name, arch, sm_count) plus what is stored beside it."""

    backend: str
    name: str
    #: compute capability for CUDA ("sm_90"), ISA level for CPUs ("x86_64-avx2")
    arch: str
    #: SMs for CUDA, cores for CPUs
    sm_count: int
    driver: str = ""
    runtime: str = ""
    memory_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def key(self) -> str:
        return f"{self.backend}:{self.name}:{self.arch}:{self.sm_count}"


@dataclass(frozen=True)
class Toolchain:
    """What makes results comparable across time: compiler, templates, libraries."""

    compiler: str  # "g++ 12.2.0", "nvcc 13.0.88"
    template_version: str  # short hash of the op's template source
    libraries: dict[str, str] = field(default_factory=dict)  # {"cutlass": "4.2.1"}

    def key(self) -> str:
        libs = ",".join(f"{k}={v}" for k, v in sorted(self.libraries.items()))
        return f"{self.compiler}|tpl={self.template_version}" + (f"|{libs}" if libs else "")


@dataclass(frozen=True)
class Variant:
    """One rendered kernel: its parameters, a readable name and a content id."""

    op: str
    name: str  # procedural, e.g. "reduce_f32_p4_a2_u2"
    params: dict[str, Any]
    source: str
    flags: tuple[str, ...]
    #: sha256 of source + flags + compiler identity + template version
    id: str


@dataclass(frozen=True)
class CompileResult:
    variant_id: str
    ok: bool
    artifact: str | None  # path of the binary/shared object in the cache
    seconds: float
    cached: bool
    log: str = ""
    timed_out: bool = False


@dataclass(frozen=True)
class Timing:
    """Robust statistics over repetitions, in microseconds."""

    median_us: float
    p20_us: float
    p80_us: float
    min_us: float
    reps: int

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: the noise band of this measurement."""
        return (self.p80_us - self.p20_us) / self.median_us if self.median_us > 0 else 0.0


@dataclass(frozen=True)
class BenchResult:
    """One variant on one problem: the outcome, its timing when it ran, and provenance."""

    variant_id: str
    variant_name: str
    params: dict[str, Any]
    outcome: Outcome
    timing: Timing | None = None
    #: derived throughput: GB/s for memory-bound ops, TFLOP/s for gemm/conv
    throughput: float | None = None
    throughput_unit: str = ""
    compile_seconds: float = 0.0
    #: excerpt of the compile or run log for failures
    log: str = ""
    #: clocks, temperature, throttle flags, host, etc.
    provenance: dict[str, Any] = field(default_factory=dict)
    #: measurement taken while throttled or while another process used the device
    suspect: bool = False
    #: joules per launch over the timed batches; None where the backend cannot measure it
    energy_j: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK and self.timing is not None


@dataclass(frozen=True)
class Trial:
    """One run of a built variant on a problem: what
    :meth:`tuner.backends.base.Backend.run` was asked to do."""

    variant: Variant
    #: the path of the variant's built shared object
    artifact: str
    request: TuneRequest
    #: stop early (outcome ABORTED_SLOW) once the variant is surely slower than this
    abort_above_us: float | None = None

    def failed(self) -> BenchResult:
        """The variant's result before it ran: a runtime error, no timing (each backend
        replaces what it learns)."""
        variant = self.variant
        return BenchResult(variant.id, variant.name, dict(variant.params), Outcome.RUNTIME_ERROR)


@dataclass
class ProblemResult:
    """All candidates measured for one problem, and the winner among the verified ones."""

    request: TuneRequest
    device: DeviceInfo
    toolchain: Toolchain
    results: list[BenchResult] = field(default_factory=list)
    winner: BenchResult | None = None
    seconds: float = 0.0
    #: the variant names that cannot be told from the fastest (tuner.winner), winner first
    tie_set: tuple[str, ...] = ()
    #: budgeted candidates the budget (time, or a cancel) left unmeasured
    unmeasured: int = 0

    @property
    def complete(self) -> bool:
        """True when every budgeted candidate was measured."""
        return self.unmeasured == 0


#: the C ABI every built artifact exports (tunehub_can_run, tunehub_workspace_bytes, tunehub_run,
#: tunehub_describe): kernel_templates/cuda/_tunehub_abi.cuh, kernel_templates/cpu/_tunehub_abi.h
ABI_VERSION = "tunehub-1"


@dataclass(frozen=True)
class BuildRecord:
    """What rebuilds a variant's artifact on another machine with the same toolchain.

    ``compiler_name build_flags flags -I<headers of needs> source -o kernel.so -l:<link>...``
    builds it. The variant id is sha256 of ``variant_source`` (``source`` when that is None),
    ``flags``, ``compiler`` and ``template_version`` (:func:`tuner.render.variant_id`).
    """

    variant_id: str
    name: str
    op: str
    #: the translation unit to compile: the CUDA rendered source as it is; on the CPU the
    #: rendered source with tunehub's own headers (_harness.h, _tunehub_abi.h) inlined
    source: str
    #: the variant's flags (part of its id)
    flags: tuple[str, ...]
    #: what building a loadable shared object adds to them (-shared -fPIC)
    build_flags: tuple[str, ...]
    #: the compiler's identity text (part of the id)
    compiler: str
    #: the compiler command: "g++", "nvcc"
    compiler_name: str
    template_version: str
    #: external header packages the source includes: "cutlass", "cublas", "cudnn"
    needs: tuple[str, ...] = ()
    #: shared libraries to link, by soname ("libcublasLt.so.13"; link each with -l:<soname>)
    link: tuple[str, ...] = ()
    #: the rendered source the id hashes, where ``source`` wraps it (the CPU); None: ``source``
    variant_source: str | None = None


@dataclass(frozen=True)
class BuiltArtifact:
    """A variant's loadable shared object (exporting the ABI_VERSION C ABI) and its record."""

    backend: str
    path: str
    sha256: str
    size: int
    record: BuildRecord
