"""The CPU backend: g++ builds batches of variants into shared objects, a runner times one.

Variants include ``kernel_templates/cpu/_harness.h`` (the template contract); ``build``
compiles many of them per compiler invocation (:mod:`tuner.backends.cpu_batch`,
:func:`tuner.compile.build_batched`) and the runner ``_runner.cpp`` once (its top documents the
protocol). ``run`` writes random inputs to a private folder once per problem, where one
runner process (:mod:`tuner.backends.cpu_runner`) loads them once and forks a child per
variant with a timeout, so a crash or a hang stays that variant's; it then verifies the
output the child wrote against :mod:`tuner.reference` and only then turns its samples into
a timing. Nothing else of tunehub runs while it times
(compiles finish before the batch is measured), and the runner reports its CPU time against
its wall time: a low share means another process took the core, and the result is suspect.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tuner import stats, winner
from tuner.abi import abi_dims
from tuner.backends import cpu_host
from tuner.backends.base import Backend
from tuner.backends.cpu_artifact import cpu_artifact
from tuner.backends.cpu_batch import RUNNER_SOURCE, batch_source, runner_key, symbol_prefix
from tuner.backends.cpu_runner import RunnerServer
from tuner.compile import CompileCache, build_batched
from tuner.errors import ToolchainError
from tuner.problems import Problem
from tuner.reference import ELEMENT_SIZE, STORAGE, make_inputs, reference, verify
from tuner.render import TEMPLATES_DIR, template_version
from tuner.spaces.base import VariantSpace
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

__all__ = ["CpuBackend", "CPU_TEMPLATES_DIR", "harness_dims"]

log = logging.getLogger(__name__)

CPU_TEMPLATES_DIR = TEMPLATES_DIR / "cpu"
#: problems whose inputs stay on disk and in memory at once (a job tunes one at a time)
_KEPT_PROBLEMS = 2
_LOG_EXCERPT = 4000
#: the runner only loads, forks and reads clocks (kernels live in the batches' objects):
#: -O1 builds it in two thirds of the time of -O3 on a cold cache
RUNNER_FLAGS = ("-O1", "-std=c++17")


def harness_dims(problem: Problem) -> list[int]:
    """The ``--dims`` of the harness: the ABI's dims (:func:`tuner.abi.abi_dims`):
    ``problem.dim_names`` in order, plus reduce's kind code or rms_norm's eps bits (the
    float32 bit pattern of :data:`tuner.abi.RMS_NORM_EPS`)."""
    return abi_dims(problem)


@dataclass
class _ProblemData:
    paths: tuple[str, ...]
    expected: np.ndarray
    #: the runner serving this problem (inputs loaded once), started on first use
    server: RunnerServer | None = None
    #: the measurement window: 0 the first runner, n the runner after n ``new_window`` calls
    window: int = 0


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _json_file(path: Path) -> dict[str, Any] | None:
    try:
        answer = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return answer if isinstance(answer, dict) else None


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, config: EngineConfig, *, compiler: str = "g++") -> None:
        super().__init__(config)
        self._compiler_name = compiler
        self._workdir = Path(tempfile.mkdtemp(prefix="tunehub-cpu-"))
        self._problems: OrderedDict[tuple[Any, ...], _ProblemData] = OrderedDict()
        self._runs = 0
        self._runner: str | None = None
        self._runner_lock = threading.Lock()

    # ---- identity ------------------------------------------------------------------------
    @cached_property
    def compiler(self) -> str:
        path = shutil.which(self._compiler_name)
        if path is None:
            raise ToolchainError(f"C++ compiler {self._compiler_name!r} not found on PATH")
        return path

    def _compiler_output(self, *args: str) -> str:
        try:
            proc = run_tool([self.compiler, *args], timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolchainError(f"{self.compiler} {' '.join(args)} failed: {exc}") from None
        if proc.returncode != 0:
            raise ToolchainError(f"{self.compiler} {' '.join(args)}: {proc.stderr.strip()[-500:]}")
        return proc.stdout

    @cached_property
    def _native_target(self) -> tuple[str, str]:
        """(what -march=native resolves to, a hash of every target option it turns on)."""
        text = self._compiler_output("-march=native", "-Q", "--help=target")
        march = ""
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "-march=":
                march = parts[1]
        return march or "unknown", hashlib.sha256(text.encode()).hexdigest()[:12]

    @cached_property
    def _identity(self) -> str:
        first = self._compiler_output("--version").splitlines()[0].strip()
        march, target_hash = self._native_target
        # -march=native means another ISA on another host: say which, so a shared cache
        # never hands one host's binary to another
        return f"{first} ({self.compiler}) native={march}/{target_hash}"

    def compiler_identity(self) -> str:
        return self._identity

    def base_flags(self, arch: str) -> tuple[str, ...]:
        return ("-O3", "-march=native", "-std=c++17", "-fno-math-errno")

    @cached_property
    def _device(self) -> DeviceInfo:
        machine = platform.machine()
        flags = cpu_host.cpu_flags()
        march, _ = self._native_target
        return DeviceInfo(
            backend="cpu",
            name=cpu_host.cpu_model_name(),
            arch=cpu_host.isa_level(machine, flags),
            sm_count=os.cpu_count() or 1,
            driver=platform.release(),
            runtime=platform.libc_ver()[1] or "",
            memory_bytes=cpu_host.memory_bytes(),
            extra={"flags": flags, "machine": machine, "march_native": march},
        )

    def device(self) -> DeviceInfo:
        return self._device

    def toolchain(self, space: VariantSpace) -> Toolchain:
        version = self._compiler_output("-dumpfullversion").strip()
        return Toolchain(
            compiler=f"{Path(self._compiler_name).name} {version}",
            template_version=template_version(space.template),
        )

    # ---- build ---------------------------------------------------------------------------
    def _argv_factory(self, *extra: str) -> Any:
        includes = [str(CPU_TEMPLATES_DIR), *self.config.include_dirs]
        compiler = self.compiler

        def make_argv(source: Path, output: Path, flags: Sequence[str]) -> list[str]:
            argv = [compiler, *flags, *extra]
            for folder in includes:
                argv += ["-I", folder]
            return [*argv, str(source), "-o", str(output)]

        return make_argv

    def runner(self) -> str:
        """The runner executable, built once per compiler and flags (cached with the variants)."""
        with self._runner_lock:
            if self._runner is None:
                self._runner = self._build_runner()
            return self._runner

    def _build_runner(self) -> str:
        cache = CompileCache(self.config.cache_dir, artifact_name="runner")
        flags = RUNNER_FLAGS
        key = runner_key(CPU_TEMPLATES_DIR, flags, self.compiler_identity())
        hit = cache.lookup(key)
        if hit is None:
            staged = cache.staging_dir()
            argv = self._argv_factory("-ldl")(
                CPU_TEMPLATES_DIR / RUNNER_SOURCE, staged / "runner", flags
            )
            try:
                proc = run_tool(argv, timeout=self.config.compile_timeout_s)
            except (OSError, subprocess.TimeoutExpired) as exc:
                shutil.rmtree(staged, ignore_errors=True)
                raise ToolchainError(f"cannot build the CPU runner: {exc}") from None
            if proc.returncode != 0:
                shutil.rmtree(staged, ignore_errors=True)
                raise ToolchainError(f"cannot build the CPU runner: {proc.stderr[-1000:]}")
            cache.publish(key, staged)
            hit = cache.lookup(key)
        if hit is None or hit.artifact is None:
            raise ToolchainError("the CPU runner vanished from the compile cache")
        return str(hit.artifact)

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        cache = CompileCache(
            self.config.cache_dir,
            max_bytes=self.config.cache_max_bytes,
            artifact_name="kernel.so",
        )
        # the runner compiles beside the first batches (it is cached after that)
        runner = threading.Thread(target=self._runner_or_later, daemon=True)
        runner.start()
        try:
            return build_batched(
                cache,
                variants,
                self._argv_factory("-shared", "-fPIC"),
                batch_source,
                source_name="batch.cpp",
                workers=self.config.compile_workers or os.cpu_count() or 1,
                timeout_s=self.config.compile_timeout_s,
            )
        finally:
            runner.join()

    def artifact(self, variant: Variant) -> tuple[str, BuildRecord]:
        """One standalone shared object exporting the C ABI (:mod:`tuner.backends.cpu_artifact`)."""
        cache = CompileCache(
            self.config.cache_dir, self.config.cache_max_bytes, artifact_name="kernel.so"
        )
        return cpu_artifact(
            variant,
            cache,
            CPU_TEMPLATES_DIR,
            compiler=self.compiler,
            compiler_name=Path(self._compiler_name).name,
            compiler_identity=self.compiler_identity(),
            timeout_s=self.config.compile_timeout_s,
        )

    def _runner_or_later(self) -> None:
        try:
            self.runner()
        except ToolchainError:  # raised again by run(), where it fails the task
            log.warning("building the CPU runner failed", exc_info=True)

    # ---- run -----------------------------------------------------------------------------
    def _problem_data(self, request: TuneRequest) -> _ProblemData:
        """Inputs on disk and the expected output, made once per problem and reused."""
        key = (request.op, request.dtype, request.layout, request.problem.key(), request.seed)
        data = self._problems.get(key)
        if data is not None:
            self._problems.move_to_end(key)
            return data
        rng = np.random.default_rng([self.config.seed, request.seed])
        inputs = make_inputs(request.problem, request.dtype, request.layout, rng)
        folder = Path(tempfile.mkdtemp(dir=self._workdir, prefix="inputs-"))
        paths = []
        for index, array in enumerate(inputs.values()):
            path = folder / f"in{index}.bin"
            array.tofile(path)
            paths.append(str(path))
        expected = reference(request.problem, request.dtype, request.layout, inputs)
        data = _ProblemData(tuple(paths), expected)
        self._problems[key] = data
        while len(self._problems) > _KEPT_PROBLEMS:
            _, old = self._problems.popitem(last=False)
            self._drop(old)
        return data

    @staticmethod
    def _drop(data: _ProblemData) -> None:
        if data.server is not None:
            data.server.close()
            data.server = None
        shutil.rmtree(Path(data.paths[0]).parent, ignore_errors=True)

    def _server(self, request: TuneRequest, data: _ProblemData) -> RunnerServer:
        if data.server is not None and data.server.alive:
            return data.server
        if data.server is not None:
            data.server.close()
        folder = Path(data.paths[0]).parent
        data.server = RunnerServer(self._argv(request, data), folder / "runner.err")
        return data.server

    def new_window(self, request: TuneRequest) -> None:
        """The next run starts a runner of its own: the inputs read again into new pages (the
        children of one runner share its pages; every child allocates its outputs anew)."""
        data = self._problem_data(request)
        if data.server is not None:
            data.server.close()
            data.server = None
        data.window += 1

    def _argv(self, request: TuneRequest, data: _ProblemData) -> list[str]:
        cfg = self.config
        return [
            self.runner(),
            "--dims",
            *map(str, harness_dims(request.problem)),
            "--inputs",
            *data.paths,
            "--warmup-seconds",
            repr(cfg.warmup_seconds),
            "--bench-seconds",
            repr(cfg.bench_seconds),
            "--min-reps",
            str(cfg.min_reps),
            "--max-reps",
            str(min(cfg.max_reps, cfg.cpu_max_reps)),
            "--target-ci",
            repr(cfg.target_ci),
            "--run-timeout",
            repr(cfg.run_timeout_s),
        ]

    def measure(self, trial: Trial) -> BenchResult:
        base, request = trial.failed(), trial.request
        data = self._problem_data(request)
        self._runs += 1
        output = self._workdir / f"out-{self._runs}.bin"
        side = [
            output,
            output.with_name(output.name + ".json"),
            output.with_name(output.name + ".err"),
        ]
        before = cpu_host.host_snapshot()
        limit = trial.abort_above_us
        abort = float(limit) if limit and limit > 0 else 0.0
        try:
            server = self._server(request, data)
            reply = server.ask(
                trial.artifact,
                symbol_prefix(trial.variant.id),
                output,
                abort,
                self.config.run_timeout_s + 10,
            )
            if reply is None:  # the runner itself is gone or stuck: start a new one next time
                why = server.failure()
                server.close()
                data.server = None
                return replace(base, log=f"the runner stopped answering\n{why}".strip())
            provenance = self._provenance(before, cpu_host.host_snapshot())
            base = replace(base, provenance={**provenance, "window": data.window})
            return self._result(base, reply, request, data, side)
        finally:
            for path in side:
                path.unlink(missing_ok=True)

    def _result(
        self,
        base: BenchResult,
        reply: dict[str, Any],
        request: TuneRequest,
        data: _ProblemData,
        side: list[Path],
    ) -> BenchResult:
        output, answer_path, err_path = side
        stderr = _read_text(err_path)[-_LOG_EXCERPT:]
        if reply.get("timeout"):
            return replace(
                base,
                outcome=Outcome.TIMEOUT,
                log=f"run exceeded {self.config.run_timeout_s:g} s and was killed",
            )
        if "signal" in reply:
            why = f"killed by {_signal_name(-int(reply['signal']))}"
            return replace(base, log=f"runner child {why}\n{stderr}".strip())
        if reply.get("exit") != 0:
            return replace(base, log=f"runner child exit status {reply.get('exit')}\n{stderr}")
        answer = _json_file(answer_path)
        if answer is None or not output.exists():
            return replace(base, log=f"runner child gave no result\n{stderr}".strip())
        got = np.fromfile(output, dtype=STORAGE[request.dtype])
        if got.size != data.expected.size:
            return replace(
                base,
                outcome=Outcome.WRONG_RESULT,
                log=f"output holds {got.size} elements, expected {data.expected.size}",
            )
        verdict = verify(got, data.expected, request.dtype, request.problem.reduction_length())
        if not verdict.ok:  # the timing of a wrong kernel is discarded
            return replace(base, outcome=Outcome.WRONG_RESULT, log=verdict.message)
        samples = [float(s) for s in answer.get("samples_us", [])]
        if not samples:
            return replace(base, log="harness reported no samples")
        timing = timing_from_samples(samples)
        cpu_share = stats.cpu_share(answer.get("cpu_seconds"), answer.get("wall_seconds"))
        # another process held the core while this one timed (tunehub compiles nothing then)
        suspect = cpu_share is not None and cpu_share < self.config.min_cpu_share
        provenance = {
            **base.provenance,
            "max_abs_error": verdict.max_abs_error,
            "error_bound_share": verdict.bound_share,
            "calls_per_sample": answer.get("calls_per_sample"),
            "copies": answer.get("copies"),
            winner.CPU_SHARE_KEY: cpu_share,
            "median_ci_rel": stats.median_ci_rel(samples),
            "spread": timing.spread,
            "suspect": suspect,
        }
        outcome = Outcome.ABORTED_SLOW if answer.get("aborted") else Outcome.OK
        throughput, unit = stats.throughput(
            request.problem, ELEMENT_SIZE[request.dtype], timing.median_us
        )
        return replace(
            base,
            outcome=outcome,
            timing=timing,
            throughput=throughput,
            throughput_unit=unit,
            provenance=provenance,
            suspect=suspect,
            log=stderr,
        )

    @staticmethod
    def _provenance(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
        # the load average is kept for the record only: it counts tunehub's own compiles,
        # so it cannot say whether a measurement was disturbed (cpu_share does)
        return {
            "hostname": cpu_host.hostname(),
            "loadavg_1m_before": before["loadavg_1m"],
            "loadavg_1m_after": after["loadavg_1m"],
            "cpu_mhz_before": before["cpu_mhz"],
            "cpu_mhz_after": after["cpu_mhz"],
            "measured_at": time.time(),
        }

    def close(self) -> None:
        for data in self._problems.values():
            self._drop(data)
        self._problems.clear()
        shutil.rmtree(self._workdir, ignore_errors=True)
