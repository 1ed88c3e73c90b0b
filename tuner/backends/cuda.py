"""The CUDA backend: nvcc builds each variant into a shared object; a harness process per
device (``tuner.backends.cuda_harness``, which owns torch) verifies and times it.

The worker process never imports torch: ``device()`` and ``run()`` talk to the harness over
pipes (one JSON line per request and answer). A harness that crashes is restarted on the next
request; one that hangs past ``run_timeout_s`` is killed and the variant counts as TIMEOUT.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner import stats
from tuner.backends.base import Backend
from tuner.backends.cuda_artifact import BUILD_FLAGS, cuda_record
from tuner.backends.cuda_process import HarnessProcess, HarnessTimeout
from tuner.compile import CompileCache, build_variants
from tuner.cutlass_paths import cutlass_include_dirs, cutlass_version
from tuner.errors import DeviceError, ToolchainError
from tuner.reference import ELEMENT_SIZE
from tuner.registry import load_space
from tuner.render import TEMPLATES_DIR, template_version
from tuner.spaces._vendor_discovery import Discovery, VendorDiscoverySpace
from tuner.spaces.base import Params, VariantSpace
from tuner.spawn import run_tool
from tuner.stats import timing_from_samples
from tuner.types import (
    BenchResult,
    BuildRecord,
    CompileResult,
    DeviceInfo,
    EngineConfig,
    Outcome,
    Toolchain,
    Trial,
    TuneRequest,
    Variant,
)
from tuner.vendor_paths import cublas_paths, cublas_version, cudnn_paths, cudnn_version

__all__ = ["CudaBackend", "arch_flags", "nvcc_version_line"]

log = logging.getLogger(__name__)

_OUTCOMES = {o.value: o for o in Outcome}
#: ops whose templates include CUTLASS headers
_CUTLASS_OPS = ("gemm", "conv2d", "scaled_gemm", "grouped_gemm")
_PROBE_TIMEOUT_S = 120.0
#: template families that call a vendor library (linked against it, its headers on the include
#: path) -> that library
_VENDOR_FAMILIES = {
    "cublaslt": "cublas",
    "cublaslt_discover": "cublas",
    "cudnn": "cudnn",
    "cudnn_discover": "cudnn",
    "cublaslt_fp8": "cublas",
    "cublaslt_fp8_discover": "cublas",
}
#: the discovery answer's JSON may be this long
_DISCOVERY_BUFFER_BYTES = 1 << 20


def arch_flags(arch: str) -> tuple[str, ...]:
    """nvcc flags every variant for ``arch`` gets (sm_90 builds the wgmma-capable sm_90a)."""
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise ToolchainError(f"unknown CUDA arch {arch!r}")
    number = arch[3:]
    target = f"{number}a" if number == "90" else number
    return (
        "-std=c++17",
        "-O3",
        "-DNDEBUG",
        f"-gencode=arch=compute_{target},code=sm_{target}",
        "--expt-relaxed-constexpr",
    )


def nvcc_version_line(nvcc: str) -> str:
    """``Cuda compilation tools, release 13.0, V13.0.88`` (the compiler identity)."""
    try:
        proc = run_tool([nvcc, "--version"], timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"nvcc is not usable at {nvcc!r}: {exc}") from None
    for line in proc.stdout.splitlines():
        if "release" in line:
            return line.strip()
    raise ToolchainError(f"cannot read nvcc's version from: {proc.stdout[-300:]!r}")


def _vendor_library(variant: Variant) -> str | None:
    return _VENDOR_FAMILIES.get(str(variant.params.get("family")))


def _vendor_paths(library: str) -> tuple[str, str, str]:
    """(include dir, lib dir, soname) of a vendor library; ToolchainError when it is absent."""
    if library == "cudnn":
        dnn = cudnn_paths()
        return dnn.include, dnn.lib, dnn.library
    lt = cublas_paths()
    return lt.include, lt.lib, lt.lt_library


def _vendor_build(library: str) -> tuple[list[str], tuple[str, ...]]:
    """(include dirs, link flags) of a vendor library; ToolchainError when it is absent."""
    include, lib, soname = _vendor_paths(library)
    link = (f"-L{lib}", f"-l:{soname}", "-Xlinker", f"-rpath={lib}")
    return [str(TEMPLATES_DIR / "cuda"), include], link


def _vendor_version(library: str) -> str:
    return cudnn_version() if library == "cudnn" else cublas_version()


def _failed(variants: Sequence[Variant], reason: str) -> dict[str, CompileResult]:
    return {v.id: CompileResult(v.id, False, None, 0.0, False, reason) for v in variants}


#: shortest timed window for the energy objective (NVML's counter advances in coarse steps)
ENERGY_BENCH_SECONDS = 0.5


class CudaBackend(Backend):
    name = "cuda"

    def __init__(
        self, config: EngineConfig, *, nvcc: str | None = None, harness_python: str | None = None
    ) -> None:
        super().__init__(config)
        self._nvcc = nvcc
        self._identity: str | None = None
        self._device: DeviceInfo | None = None
        self.harness_python = harness_python or sys.executable
        # absolute: the compiler runs inside the staging folder
        self.cache = CompileCache(
            Path(config.cache_dir).resolve() / "cuda",
            config.cache_max_bytes,
            artifact_name="kernel.so",
        )
        self._harness: HarnessProcess | None = None
        #: the last discovery answer (attributes, workspace, waves, round-trip check)
        self.last_discovery: list[dict[str, Any]] = []

    # -- toolchain -------------------------------------------------------------------------

    def nvcc(self) -> str:
        if self._nvcc is None:
            found = shutil.which("nvcc")
            if found is None:
                raise ToolchainError("nvcc is not on PATH: install the CUDA toolkit (13.0)")
            self._nvcc = found
        return self._nvcc

    def compiler_identity(self) -> str:
        if self._identity is None:
            self._identity = nvcc_version_line(self.nvcc())
        return self._identity

    def base_flags(self, arch: str) -> tuple[str, ...]:
        return arch_flags(arch)

    def toolchain(self, space: VariantSpace) -> Toolchain:
        version = self.compiler_identity().rsplit("V", 1)[-1]
        libraries = {}
        if space.op in _CUTLASS_OPS and cutlass_version():
            libraries["cutlass"] = cutlass_version()
        if getattr(space, "discovery_params", None):
            vendors = (
                str(getattr(space, "discovery_library", "cublas")),
                *getattr(space, "other_vendor_libraries", ()),
            )
            for vendor in vendors:
                if _vendor_version(vendor):
                    libraries[vendor] = _vendor_version(vendor)
        return Toolchain(f"nvcc {version}", template_version(space.template), libraries)

    def _include_dirs(self, variants: Sequence[Variant]) -> list[str]:
        dirs = [str(TEMPLATES_DIR / "cuda")]
        if any(v.op in _CUTLASS_OPS and v.params.get("family") != "skinny" for v in variants):
            dirs += cutlass_include_dirs(self.config.include_dirs)
        else:
            dirs += list(self.config.include_dirs)
        return dirs

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        """Compile in parallel; cuBLASLt and cuDNN variants also get the library's headers and
        link to it."""
        plain = [v for v in variants if _vendor_library(v) is None]
        results: dict[str, CompileResult] = {}
        if plain:
            results.update(self._build(plain, self._include_dirs(plain), ()))
        for library in sorted({lib for v in variants if (lib := _vendor_library(v))}):
            vendor = [v for v in variants if _vendor_library(v) == library]
            try:
                includes, link = _vendor_build(library)
            except ToolchainError as exc:
                results.update(_failed(vendor, str(exc)))
                continue
            results.update(self._build(vendor, includes, link))
        return results

    def _build(
        self, variants: Sequence[Variant], include_dirs: Sequence[str], link: Sequence[str]
    ) -> dict[str, CompileResult]:
        nvcc = self.nvcc()
        self.compiler_identity()
        includes = [f"-I{d}" for d in include_dirs]

        def make_argv(source: Path, output: Path, flags: Sequence[str]) -> list[str]:
            return [
                nvcc,
                *flags,
                *BUILD_FLAGS,
                *includes,
                "-o",
                str(output),
                str(source),
                *link,
            ]

        return build_variants(
            self.cache,
            variants,
            make_argv,
            source_name="kernel.cu",
            workers=self.config.compile_workers or os.cpu_count() or 1,
            timeout_s=self.config.compile_timeout_s,
        )

    def artifact(self, variant: Variant) -> tuple[str, BuildRecord]:
        """The variant's own kernel.so from the compile cache (built when evicted) and its
        record (:mod:`tuner.backends.cuda_artifact`); ToolchainError when it does not build."""
        built = self.build([variant])[variant.id]
        if not built.ok or built.artifact is None:
            raise ToolchainError(f"{variant.name} did not build: {built.log[-2000:]}")
        library = _vendor_library(variant)
        link = (_vendor_paths(library)[2],) if library else ()
        space = load_space(variant.op, self.name)
        record = cuda_record(
            variant, self.compiler_identity(), template_version(space.template), link
        )
        return built.artifact, record

    def discover(self, request: TuneRequest, arch: str) -> list[Params]:
        """The vendor algorithms of the problem (cuBLASLt's for GEMM, cuDNN's engine configs for
        conv2d, and cuBLASLt's for a 1x1 conv2d): each of the space's discovery builds, run in
        the harness like a variant (a crash or hang costs only that build's candidates);
        ``last_discovery`` holds their answers, in the same order."""
        space = load_space(request.op, self.name)
        self.last_discovery = []
        if not isinstance(space, VendorDiscoverySpace):
            return []
        discovered: list[Params] = []
        for discovery in space.discoveries(request.problem):
            found = self._discover_one(space, discovery, request, arch)
            self.last_discovery += found
            discovered += space.from_discovery(found, discovery)
        return discovered

    def _discover_one(
        self, space: VendorDiscoverySpace, discovery: Discovery, request: TuneRequest, arch: str
    ) -> list[dict[str, Any]]:
        """One discovery build's answer ([] when the library is absent or the build fails)."""
        library = discovery.library
        try:
            cudnn_paths() if library == "cudnn" else cublas_paths()
        except ToolchainError as exc:
            log.warning("no %s candidates: %s", library, exc)
            return []
        variant = self.render(space, discovery.params, request.dtype, request.layout, arch)
        built = self.build([variant])[variant.id]
        if not built.ok or built.artifact is None:
            log.warning("%s discovery did not build: %s", library, built.log[-2000:])
            return []
        payload = {
            "cmd": "discover",
            "artifact": built.artifact,
            "op": request.op,
            "problem": request.problem.dims(),
            "requested": discovery.requested,
            "buffer_bytes": _DISCOVERY_BUFFER_BYTES,
        }
        try:
            answer = self.request(payload, self.config.run_timeout_s)
        except HarnessTimeout as exc:
            log.warning("%s discovery hung: %s", library, exc)
            return []
        found = answer.get("algos")
        if not isinstance(found, list):
            log.warning("%s discovery failed: %s", library, answer.get("log", answer))
            return []
        return found

    # -- device ----------------------------------------------------------------------------

    def _harness_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CUDA_VISIBLE_DEVICES"] = str(self.config.device_index)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _harness_argv(self, mode: str) -> list[str]:
        return [self.harness_python, "-m", "tuner.backends.cuda_harness", mode]

    def device(self) -> DeviceInfo:
        if self._device is not None:
            return self._device
        try:
            proc = run_tool(
                self._harness_argv("--probe"), timeout=_PROBE_TIMEOUT_S, env=self._harness_env()
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DeviceError(f"the CUDA harness probe failed: {exc}") from None
        try:
            info = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            detail = proc.stderr[-800:]
            raise DeviceError(f"the CUDA harness probe gave no answer: {detail}") from None
        if "error" in info:
            raise DeviceError(f"no usable CUDA device {self.config.device_index}: {info['error']}")
        self._device = DeviceInfo(
            backend="cuda",
            name=info["name"],
            arch=info["arch"],
            sm_count=int(info["sm_count"]),
            driver=info.get("driver", ""),
            runtime=info.get("runtime", ""),
            memory_bytes=int(info.get("memory_bytes", 0)),
            extra={k: info[k] for k in ("l2_bytes", "pci_bus_id", "uuid", "torch") if k in info},
        )
        return self._device

    def harness(self) -> HarnessProcess:
        if self._harness is None:
            self._harness = HarnessProcess(self._harness_argv("--serve"), self._harness_env())
        return self._harness

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """One request to the harness (started on demand); raises HarnessTimeout on a hang."""
        return self.harness().request(payload, timeout_s)

    def measure_copy_bandwidth(self, nbytes: int = 1 << 30) -> float:
        """Device-to-device copy rate in GB/s (read + write), the ceiling of memory-bound ops."""
        answer = self.request({"cmd": "copy", "bytes": int(nbytes)}, self.config.run_timeout_s)
        if "gb_per_s" not in answer:
            raise DeviceError(f"copy bandwidth measurement failed: {answer.get('log', answer)}")
        return float(answer["gb_per_s"])

    def measure(self, trial: Trial) -> BenchResult:
        request = trial.request
        payload = {
            "cmd": "run",
            "artifact": str(trial.artifact),
            "op": request.op,
            "dtype": request.dtype,
            "layout": request.layout,
            "problem": request.problem.dims(),
            "seed": request.seed or self.config.seed,
            "warmup_s": self.config.warmup_seconds,
            # the energy counter needs a longer window than a median of batches does
            "bench_s": max(
                self.config.bench_seconds,
                ENERGY_BENCH_SECONDS if request.objective == "energy" else 0.0,
            ),
            "min_samples": self.config.min_reps,
            "max_samples": self.config.max_reps,
            "abort_us": trial.abort_above_us,
        }
        base = trial.failed()
        started = time.monotonic()
        try:
            answer = self.request(payload, self.config.run_timeout_s)
        except HarnessTimeout as exc:
            return replace(base, outcome=Outcome.TIMEOUT, log=str(exc))
        return self._result(base, answer, request, time.monotonic() - started)

    def _result(
        self, base: BenchResult, answer: dict[str, Any], request: TuneRequest, seconds: float
    ) -> BenchResult:
        outcome = _OUTCOMES.get(str(answer.get("outcome")), Outcome.RUNTIME_ERROR)
        provenance = dict(answer.get("provenance", {}))
        provenance.update(run_seconds=round(seconds, 3), harness_describe=answer.get("describe"))
        if self._device is not None:
            provenance["device"] = self._device.key()
        for key in ("max_abs_error", "error_bound_share"):
            if key in answer:
                provenance[key] = answer[key]
        reasons = list(answer.get("suspect_reasons", []))
        if reasons:
            provenance["suspect_reasons"] = reasons
        samples = answer.get("samples_us") or []
        timing = timing_from_samples(samples) if samples else None
        throughput, unit = (
            (None, "")
            if timing is None
            else stats.throughput(request.problem, ELEMENT_SIZE[request.dtype], timing.median_us)
        )
        return replace(
            base,
            outcome=outcome,
            timing=timing,
            throughput=throughput,
            throughput_unit=unit,
            log=str(answer.get("log", ""))[-4000:],
            provenance=provenance,
            suspect=bool(reasons),
            energy_j=float(answer["energy_j"]) if answer.get("energy_j") else None,
        )

    def close(self) -> None:
        if self._harness is not None:
            self._harness.close()
            self._harness = None
