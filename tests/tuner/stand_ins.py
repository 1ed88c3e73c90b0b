"""Test doubles for the engine and the worker: backends whose builds and runs are scripted.

:class:`StandInBackend` keeps the real spaces, rendering and engine, and replaces the
compiler and the device: ``build`` returns a made-up artifact at once, or once the test
opens the variant's gate (a slow build: a CUTLASS instance takes ~40 s with nvcc); ``run``
returns the time the script gives the variant (by the role the test gave it, and how many
times it ran: the first pass, then the confirmation rounds) and, where scripted, joules per
launch. Named ``cpu`` or ``cuda``, it has that backend's capabilities (tuner.capabilities)
unless the test gives others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tuner.backends.base import Backend
from tuner.capabilities import Capabilities
from tuner.spaces.base import VariantSpace
from tuner.types import (
    BenchResult,
    CompileResult,
    DeviceInfo,
    EngineConfig,
    Outcome,
    Timing,
    Toolchain,
    Trial,
    Variant,
)

__all__ = ["Script", "StandInBackend", "STAND_IN_CPU", "STAND_IN_GPU"]

STAND_IN_CPU = DeviceInfo("cpu", "Stand-in CPU", "x86_64-avx2", 4)
STAND_IN_GPU = DeviceInfo("cuda", "Stand-in H200", "sm_90", 132, extra={"uuid": "GPU-standin"})


@dataclass
class Script:
    """What the stand-in measures. Variants get roles in the order they are first timed
    (``roles[0]`` for the first one, ...); a role's times are its first pass, then one per
    confirmation round (the last repeats); variants without a role take ``other_us``."""

    roles: Sequence[str] = ()
    times: dict[str, list[float]] = field(default_factory=dict)
    other_us: float = 30.0
    #: joules per launch by role (None: no energy counter reading)
    energy_j: dict[str, float] = field(default_factory=dict)
    #: variant name -> role, in the order they were first timed
    assigned: dict[str, str] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)

    def role(self, name: str) -> str | None:
        if name not in self.assigned and len(self.assigned) < len(self.roles):
            self.assigned[name] = self.roles[len(self.assigned)]
        return self.assigned.get(name)

    def time_us(self, name: str) -> float:
        n = self.runs.get(name, 0)
        self.runs[name] = n + 1
        role = self.role(name)
        times = self.times.get(role, []) if role else []
        return times[min(n, len(times) - 1)] if times else self.other_us


class StandInBackend(Backend):
    """A scripted backend (module doc); ``gate(variant)``: the event its build waits for
    (None: built at once; an event the test never sets: a build still running when the
    budget ends)."""

    def __init__(
        self,
        config: EngineConfig,
        script: Script | None = None,
        *,
        device: DeviceInfo = STAND_IN_CPU,
        capabilities: Capabilities | None = None,
        gate: Callable[[Variant], threading.Event | None] = lambda _: None,
    ) -> None:
        super().__init__(config)
        self.name = device.backend
        self.script = script or Script()
        self._device = device
        self._capabilities = capabilities
        self.gate = gate
        #: ("build" | "run", variant name), in the order they happened
        self.events: list[tuple[str, str]] = []

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities or super().capabilities

    def device(self) -> DeviceInfo:
        return self._device

    def toolchain(self, space: VariantSpace) -> Toolchain:
        return Toolchain("stand-in-cc 1.0", "tpl-standin")

    def base_flags(self, arch: str) -> tuple[str, ...]:
        return ()

    def compiler_identity(self) -> str:
        return "stand-in-cc 1.0"

    def build(self, variants: Sequence[Variant]) -> dict[str, CompileResult]:
        for variant in variants:
            gate = self.gate(variant)
            if gate is not None:
                gate.wait(timeout=120.0)
            self.events.append(("build", variant.name))
        return {v.id: CompileResult(v.id, True, "stand-in.so", 0.0, False) for v in variants}

    def measure(self, trial: Trial) -> BenchResult:
        variant, abort_above_us = trial.variant, trial.abort_above_us
        self.events.append(("run", variant.name))
        us = self.script.time_us(variant.name)
        role = self.script.role(variant.name)
        slower = abort_above_us is not None and us > abort_above_us
        return BenchResult(
            variant.id,
            variant.name,
            variant.params,
            Outcome.ABORTED_SLOW if slower else Outcome.OK,
            Timing(us, us * 0.995, us * 1.005, us * 0.99, 50),
            throughput=1e3 / us,
            throughput_unit="GB/s",
            provenance={"cpu_share": 1.0} if self.name == "cpu" else {},
            energy_j=self.script.energy_j.get(role) if role else None,
        )
