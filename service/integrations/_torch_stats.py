"""What the PyTorch ops report: per shape, where its kernel came from (or why it fell back)
and how often each path ran; per op, the totals."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "Fallback",
    "FALLBACK_REASONS",
    "RECORDED_REASONS",
    "ShapeStat",
    "OpCounts",
    "TorchStats",
]

#: why an op call ran torch's own op (``Fallback.reason``)
FALLBACK_REASONS = (
    "no_server",  # no server configured (configure(server=...) or TUNEHUB_SERVER)
    "unreachable",  # the service could not be reached and nothing was cached
    "not_tuned",  # the service has no answer for this shape on this device
    "too_far",  # the nearest tuned shape is beyond the distance bound
    "refused",  # the variant's tunehub_can_run refused the dims
    "no_library",  # no artifact, and no way to build the variant from source
    "run_failed",  # tunehub_run returned an error code
    "service_error",  # the service refused the question (e.g. an op it does not know)
    "unsupported",  # a call tunehub has no kernel for (dtype, dim, groups, autograd, ...)
)
#: the reasons whose shapes ``record()`` writes: a tuning job can give them an answer
RECORDED_REASONS = frozenset({"no_server", "unreachable", "not_tuned", "too_far", "refused"})


@dataclass(frozen=True)
class Fallback:
    reason: str
    message: str

    def __str__(self) -> str:
        return f"fallback: {self.message}"


@dataclass
class ShapeStat:
    """One (op, dtype, layout, problem, device) this process ran.

    ``source`` is "artifact" (downloaded and sha256-checked in this process), "source build"
    (compiled here from the variant's source), "on-disk cache" (answer and library both from
    local caches: no network, no compile), or "fallback: <why>"."""

    op: str
    dtype: str
    layout: str
    problem: dict[str, Any]
    device: str
    source: str
    variant: str | None = None
    #: whether the answer was tuned for this very shape (False: the nearest tuned shape)
    exact: bool | None = None
    distance: float | None = None
    tunehub_calls: int = 0
    fallback_calls: int = 0
    fallback: Fallback | None = None
    #: seconds the first call spent finding and loading the kernel
    resolve_seconds: float = 0.0

    def record(self) -> dict[str, Any]:
        """The ConfigQuery-like record ``record()`` writes and ``tunehub tune --from-file``
        reads."""
        return {
            "op": self.op,
            "dtype": self.dtype,
            "layout": self.layout,
            "problem": self.problem,
            "device": self.device,
        }


@dataclass
class OpCounts:
    tunehub: int = 0
    fallback: int = 0
    #: fallback calls per reason
    reasons: Counter[str] = field(default_factory=Counter)


@dataclass
class TorchStats:
    ops: dict[str, OpCounts]
    shapes: list[ShapeStat]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: ``{"ops": {op: {tunehub, fallback, reasons}}, "shapes": [...]}``."""
        return {
            "ops": {
                op: {"tunehub": c.tunehub, "fallback": c.fallback, "reasons": dict(c.reasons)}
                for op, c in self.ops.items()
            },  # fmt: skip
            "shapes": [
                {**asdict(s), "fallback": asdict(s.fallback) if s.fallback else None}
                for s in self.shapes
            ],
        }

    def __str__(self) -> str:
        return self.format()

    def format(self) -> str:
        """Plain text: a line per op (calls on tunehub kernels and on torch, by reason), then
        a line per shape (dims, calls, where its kernel came from or why it fell back)."""
        lines = []
        for op, counts in sorted(self.ops.items()):
            why = ", ".join(f"{r} {n}" for r, n in sorted(counts.reasons.items()))
            lines.append(
                f"{op}: {counts.tunehub} calls on tunehub kernels, {counts.fallback} on torch"
                + (f" ({why})" if why else "")
            )
        for shape in self.shapes:
            dims = ",".join(f"{k}={v}" for k, v in shape.problem.items())
            calls = shape.tunehub_calls + shape.fallback_calls
            where = shape.source
            if shape.variant and shape.fallback is None:
                near = "" if shape.exact else f", nearest at {shape.distance:.2f}"
                where += f" [{shape.variant}{near}]"
            lines.append(f"  {shape.op} {shape.dtype} {dims} x{calls}: {where}")
        return "\n".join(lines) if lines else "no tunehub op has run"
