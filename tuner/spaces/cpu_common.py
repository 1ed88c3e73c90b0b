"""What every CPU space shares: storage types of the C++ harness, request checks, and the
row-wise spaces' enumeration and pruning (reduce, softmax, rms_norm)."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any

from tuner.epilogues import NONE, params_epilogue, with_epilogues
from tuner.errors import InvalidRequestError
from tuner.problems import Problem
from tuner.spaces.base import Params, VariantSpace, params_product

__all__ = [
    "STORAGE_TYPES",
    "check_dtype_layout",
    "smallest_covering",
    "CpuFusedSpace",
    "CpuRowSpace",
]

#: storage dtype -> the C++ type kernel_templates/cpu/_harness.h stores it as
STORAGE_TYPES: dict[str, str] = {"f32": "float", "f16": "_Float16", "bf16": "th::bf16_t"}


def check_dtype_layout(op: str, dtype: str, layout: str, layouts: tuple[str, ...]) -> None:
    """Raise InvalidRequestError unless the CPU templates can store ``dtype`` in ``layout``."""
    if dtype not in STORAGE_TYPES:
        supported = sorted(STORAGE_TYPES)
        raise InvalidRequestError("dtype", f"cpu {op} supports {supported}, not {dtype!r}")
    if layout not in layouts:
        raise InvalidRequestError("layout", f"cpu {op} supports {list(layouts)}, not {layout!r}")


def smallest_covering(options: tuple[int, ...], size: int) -> int | None:
    """The smallest option >= size (larger blocks run the very same loop trip counts, so
    variants above it behave exactly like it), if any."""
    covering = [o for o in options if o >= size]
    return min(covering) if covering else None


class CpuFusedSpace(VariantSpace):
    """A CPU space of plain variants, each also once per fused epilogue (``tuner.epilogues``),
    compiled with contracted multiply-adds. Subclasses list the plain ones in ``_plain``."""

    backend = "cpu"
    #: the fused epilogues this op's templates take
    epilogues: tuple[str, ...]
    #: the template of a variant with a fused epilogue (the plain one plus bias + activation)
    fused_template: str

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        """Every plain variant, then each once per fused epilogue (``tuner.epilogues``)."""
        return with_epilogues(self._plain(dtype, layout, arch), self.epilogues)

    @abstractmethod
    def _plain(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        """Every variant without an epilogue, in a stable order."""

    def template_for(self, params: Params) -> str:
        return self.template if params_epilogue(params) == NONE else self.fused_template

    def flags(self, params: Params, arch: str) -> tuple[str, ...]:
        # fuse multiply-adds even under -std=c++17 (ISO mode turns contraction off)
        return ("-ffp-contract=fast",)


class CpuRowSpace(VariantSpace):
    """A CPU space over rows of length k: every combination of ``axes`` (in their order) whose
    main-loop step (the product of the ``step_axes`` values) is at most ``max_step``, pruned
    where the step exceeds k. Subclasses name the axes, the problem type and the template."""

    backend = "cpu"
    #: axis name -> its values; the product runs over them in this order
    axes: dict[str, tuple[Any, ...]]
    #: integer axes whose product is the elements one main-loop step covers
    step_axes: tuple[str, ...]
    #: most elements one main-loop step may cover: more only spills registers
    max_step: int
    problem_type: type[Problem]
    #: how a prune reason names the problem type ("a reduce", "an rms_norm")
    problem_noun: str

    def step(self, params: Params) -> int:
        return math.prod(int(params[axis]) for axis in self.step_axes)

    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterator[Params]:
        check_dtype_layout(self.op, dtype, layout, ("row",))
        return params_product({}, self.axes, lambda params: self.step(params) <= self.max_step)

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        if not isinstance(problem, self.problem_type):
            return f"not {self.problem_noun} problem: {type(problem).__name__}"
        step = self.step(params)
        k = int(getattr(problem, "k"))  # noqa: B009
        if step > k:
            return f"main-loop step of {step} elements exceeds the row length k={k}"
        return None

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        check_dtype_layout(self.op, dtype, layout, ("row",))
        return {
            **{axis: int(params[axis]) for axis in self.step_axes},
            "dtype": dtype,
            "layout": layout,
            "storage_type": STORAGE_TYPES[dtype],
            "name": self.name(params, dtype, layout),
        }
