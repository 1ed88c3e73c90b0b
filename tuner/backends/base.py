"""A backend compiles variants and runs them on one device.

    backend.device()                       -> DeviceInfo (the device key and its provenance)
    backend.toolchain(space)               -> Toolchain  (compiler + template version + libs)
    backend.build(variants)                -> {variant_id: CompileResult}, cached and parallel
    backend.run(variant, artifact, request, abort_above_us) -> BenchResult (each backend's
                                              ``measure(Trial)`` does the work)
    backend.discover(request, arch)        -> [params] found on the device (vendor algorithms)
    backend.artifact(variant)              -> (path, BuildRecord): a loadable shared object of
                                              one variant exporting the tunehub C ABI
    backend.capabilities                   -> Capabilities (energy, compile overlap, early stop)

``run`` must verify the variant's output against a reference before its timing counts, and
must turn a crash, a hang or a wrong answer into that variant's outcome, never an exception.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from tuner.capabilities import CAPABILITIES, Capabilities
from tuner.errors import ToolchainError
from tuner.render import render_variant
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

__all__ = ["Backend"]


class Backend(ABC):
    name: str

    def __init__(self, config: EngineConfig) -> None:
        self.config = config

    @property
    def capabilities(self) -> Capabilities:
        """What this backend can do (:mod:`tuner.capabilities`, by its name; a backend the
        table does not name can do none of it). Wrappers delegate; test doubles override."""
        return CAPABILITIES.get(self.name, Capabilities())

    @abstractmethod
    def device(self) -> DeviceInfo: ...

    @abstractmethod
    def toolchain(self, space: VariantSpace) -> Toolchain: ...

    @abstractmethod
    def base_flags(self, arch: str) -> tuple[str, ...]:
        """Compiler flags every variant gets (part of the variant id)."""

    @abstractmethod
    def compiler_identity(self) -> str:
        """Compiler path + version text; part of every variant id and cache key."""

    def render(
        self, space: VariantSpace, params: Params, dtype: str, layout: str, arch: str
    ) -> Variant:
        """One variant of ``space`` rendered for this backend (its flags and compiler identity
        are part of the variant id)."""
        return render_variant(
            space, params, dtype, layout, arch, self.base_flags(arch), self.compiler_identity()
        )

    @abstractmethod
    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]: ...

    def run(
        self,
        variant: Variant,
        artifact: str,
        request: TuneRequest,
        abort_above_us: float | None = None,
    ) -> BenchResult:
        """Verify ``variant`` (built at ``artifact``) on ``request``'s problem, then time it;
        give up early once it is surely slower than ``abort_above_us``. Backends implement
        :meth:`measure`."""
        return self.measure(Trial(variant, artifact, request, abort_above_us))

    @abstractmethod
    def measure(self, trial: Trial) -> BenchResult:
        """The work of :meth:`run` (module doc: a failure is the result's outcome, never an
        exception)."""

    def new_window(self, request: TuneRequest) -> None:  # noqa: B027 - optional hook
        """Make the next runs of ``request`` a measurement window of their own: state that
        every run of one window shares and that can move a kernel's time by a few percent
        (on the CPU, the runner process, whose input buffers lie in one set of physical
        pages) is set up again, differently. The engine calls it before each confirmation
        round, so the rounds sample independent windows and their spread includes what
        differs between windows. Nothing to do where runs share no such state (the
        default)."""

    def discover(self, request: TuneRequest, arch: str) -> list[Params]:
        """Candidates that only the device can name for this problem (e.g. the algorithms a
        vendor library's heuristic returns), or none; failures log and return none."""
        return []

    def artifact(self, variant: Variant) -> tuple[str, BuildRecord]:
        """The path of ``variant``'s standalone shared object, which exports the tunehub C ABI
        (``tunehub_can_run``, ``tunehub_workspace_bytes``, ``tunehub_run``,
        ``tunehub_describe``), built or taken from the compile cache, and the record that
        rebuilds it elsewhere. Call it through :func:`tuner.artifacts.build_artifact`.
        Raises ToolchainError when it cannot be built."""
        raise ToolchainError(f"the {self.name} backend builds no artifacts")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release device slots, harness processes and pools."""
