"""A backend compiles variants and runs them on one device.

    backend.device()                       -> DeviceInfo (the device key and its provenance)
    backend.toolchain(space)               -> Toolchain  (compiler + template version + libs)
    backend.build(variants)                -> {variant_id: CompileResult}, cached and parallel
    backend.run(variant, artifact, request, abort_above_us) -> BenchResult

``run`` must verify the variant's output against a reference before its timing counts, and
must turn a crash, a hang or a wrong answer into that variant's outcome, never an exception.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from tuner.spaces.base import VariantSpace
from tuner.types import (
    BenchResult,
    CompileResult,
    DeviceInfo,
    EngineConfig,
    Toolchain,
    TuneRequest,
    Variant,
)

__all__ = ["Backend"]


class Backend(ABC):
    name: str
    #: whether ``run`` stores joules per launch (``BenchResult.energy_j``): the ``energy``
    #: objective is refused for backends without an energy counter
    measures_energy: bool = False

    def __init__(self, config: EngineConfig) -> None:
        self.config = config

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

    @abstractmethod
    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]: ...

    @abstractmethod
    def run(
        self,
        variant: Variant,
        artifact: str,
        request: TuneRequest,
        abort_above_us: float | None = None,
    ) -> BenchResult: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release device slots, harness processes and pools."""
