"""A slot's backend: compiles shared by every slot, runs pinned to the slot's cores.

    builds = BuildCoordinator(workers=16)                     # one per worker
    backend = SlotBackend(CudaBackend(config), SlotSpec("cuda", 1), builds)

:class:`SlotBackend` wraps the real backend of one slot (``service/agent/slots.py`` runs a
worker agent per slot): ``build`` goes through the worker's one :class:`BuildCoordinator`,
``run`` pins the benchmark process to the slot's cores (CPU slots) and names the slot in the
result's provenance. Everything else, the capabilities among it, is the wrapped backend's:
delegated, never copied.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from tuner.backends.base import Backend
from tuner.capabilities import Capabilities
from tuner.registry import load_backend_class
from tuner.spaces.base import Params, VariantSpace
from tuner.types import (
    BenchResult,
    BuildRecord,
    CompileResult,
    DeviceInfo,
    EngineConfig,
    Toolchain,
    Trial,
    TuneRequest,
    Variant,
)

__all__ = [
    "SlotSpec",
    "BuildCoordinator",
    "SlotBackend",
    "SlotBackendFactory",
    "default_slot_backend",
]


@dataclass(frozen=True)
class SlotSpec:
    """One benchmarking slot: a backend, the GPU index (or CPU slot number), pinned cores."""

    backend: str
    index: int
    #: CPU slots: the cores its benchmark processes may use (empty: no pinning)
    cpus: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.backend}:{self.index}"


# -- shared compiles --------------------------------------------------------------------------


class BuildCoordinator:
    """Compiles each variant once for every slot: a lock (an event) per variant id in flight.

    A slot builds the variants nobody else is building and waits for the rest, then reads
    them from the compile cache (a cache hit costs nothing and says ``cached=True``). The
    compilers of every slot together stay within ``workers`` (the engine's compile workers):
    a build of n variants holds min(n, workers) of them, so N slots never start N times as
    many compilers as the host has cores (nvcc with CUTLASS takes gigabytes each), and an
    engine that builds one variant per call (to time each as soon as it is built) still
    runs ``workers`` compiles at once.
    """

    def __init__(self, workers: int | None = None) -> None:
        self._lock = threading.Lock()
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._free = self.workers
        self._freed = threading.Condition()
        self._in_flight: dict[str, threading.Event] = {}
        #: variant id -> how many times a slot ran the compiler for it (1 unless it timed out)
        self.compiled: dict[str, int] = {}

    @contextlib.contextmanager
    def _compilers(self, count: int) -> Iterator[None]:
        """Hold ``count`` of the worker's compilers (at most all of them) while building."""
        count = min(max(count, 1), self.workers)
        with self._freed:
            self._freed.wait_for(lambda: self._free >= count)
            self._free -= count
        try:
            yield
        finally:
            with self._freed:
                self._free += count
                self._freed.notify_all()

    def build(self, backend: Backend, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        mine: dict[str, Variant] = {}
        others: list[tuple[Variant, threading.Event]] = []
        with self._lock:
            for variant in variants:
                if variant.id in mine:
                    continue
                event = self._in_flight.get(variant.id)
                if event is None:
                    self._in_flight[variant.id] = threading.Event()
                    mine[variant.id] = variant
                else:
                    others.append((variant, event))
        results: dict[str, CompileResult] = {}
        try:
            if mine:
                with self._compilers(len(mine)):
                    results = dict(backend.build(list(mine.values())))
        finally:
            with self._lock:
                for variant_id in mine:
                    result = results.get(variant_id)
                    if result is not None and not result.cached:
                        self.compiled[variant_id] = self.compiled.get(variant_id, 0) + 1
                    self._in_flight.pop(variant_id).set()
        if others:
            for _, event in others:
                event.wait()
            results.update(backend.build([variant for variant, _ in others]))
        return results


# -- one slot's backend ----------------------------------------------------------------------


@contextlib.contextmanager
def _pinned(cpus: tuple[int, ...]) -> Iterator[None]:
    """Pin the calling thread (and so the processes it starts) to ``cpus`` for a while.

    On Linux the mask belongs to the thread, and a child process inherits its parent
    thread's mask: the benchmark runs on the slot's cores, the compilers (started from
    other threads) stay free to use any core.
    """
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


class SlotBackend(Backend):
    """A slot's view of its backend: shared compiles, pinned runs, the slot in provenance."""

    def __init__(self, inner: Backend, slot: SlotSpec, builds: BuildCoordinator) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.slot = slot
        self.builds = builds
        self.name = inner.name

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def device(self) -> DeviceInfo:
        return self.inner.device()

    def toolchain(self, space: VariantSpace) -> Toolchain:
        return self.inner.toolchain(space)

    def base_flags(self, arch: str) -> tuple[str, ...]:
        return self.inner.base_flags(arch)

    def compiler_identity(self) -> str:
        return self.inner.compiler_identity()

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        return self.builds.build(self.inner, variants)

    def measure(self, trial: Trial) -> BenchResult:
        # through the inner backend's run: a backend that wraps its own run keeps doing so
        with _pinned(self.slot.cpus):
            result = self.inner.run(
                trial.variant, trial.artifact, trial.request, trial.abort_above_us
            )
        provenance = dict(result.provenance)
        provenance["slot"] = self.slot.label
        if self.slot.cpus:
            provenance["slot_cpus"] = list(self.slot.cpus)
        pci = self.inner.device().extra.get("pci_bus_id")
        if pci:
            provenance["pci_bus_id"] = pci
        return replace(result, provenance=provenance)

    def new_window(self, request: TuneRequest) -> None:
        self.inner.new_window(request)

    def discover(self, request: TuneRequest, arch: str) -> list[Params]:
        # vendor candidates (cuBLASLt algorithms) only the slot's own device can name
        return self.inner.discover(request, arch)

    def artifact(self, variant: Variant) -> tuple[str, BuildRecord]:
        # a winner's artifact: a hit in the compile cache every slot shares (CUDA), or one
        # standalone compile under its own key (CPU), which the cache publishes race-free
        return self.inner.artifact(variant)

    def close(self) -> None:
        self.inner.close()


def default_slot_backend(slot: SlotSpec, config: EngineConfig) -> Backend:
    """The real backend of a slot: a CUDA slot's engine config names its GPU."""
    if slot.backend == "cuda":
        config = replace(config, device_index=slot.index)
    return load_backend_class(slot.backend)(config)


SlotBackendFactory = Callable[[SlotSpec, EngineConfig], Backend]
