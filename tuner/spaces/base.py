"""The variant space of one (op, backend): parameters as data, constraints that prune.

A space enumerates parameter dicts for an arch independent of the problem shape, because one
compiled variant serves every shape (dims are runtime arguments of the kernel). ``prune`` then
rules out, per problem, what cannot run or cannot be correct there (alignment, divisibility,
shared memory), with a reason a user can read.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from tuner.problems import Problem

__all__ = ["VariantSpace", "Params", "params_product"]

Params = dict[str, Any]


def params_product(
    fixed: Params, axes: Mapping[str, Iterable[Any]], keep: Callable[[Params], bool]
) -> Iterator[Params]:
    """``fixed`` with every combination of the ``axes`` values (the product in the axes'
    order, the last axis fastest) that ``keep`` accepts."""
    for values in itertools.product(*axes.values()):
        params = {**fixed, **dict(zip(axes, values, strict=True))}
        if keep(params):
            yield params


class VariantSpace(ABC):
    """Subclass per (op, backend). Only validated ints and enums reach the template."""

    op: str
    backend: str
    #: template path relative to kernel_templates/, e.g. "cpu/reduce.cpp.j2"
    template: str
    #: cap of one problem's search when the job's budget names none (None: the whole space);
    #: large spaces (CUTLASS GEMM) order their strongest candidates first and set this
    default_max_variants: int | None = None

    @abstractmethod
    def enumerate(self, dtype: str, layout: str, arch: str) -> Iterable[Params]:
        """Every parameter dict legal on ``arch`` for this dtype/layout, in a stable order."""

    def discovered_reason(self, params: Params, dtype: str, layout: str, arch: str) -> str | None:
        """For params that ``enumerate`` cannot list because the backend found them on the
        device (vendor algorithms, ``Backend.discover``): why they are not well-formed
        candidates of this space (None when they are). Spaces without discovery accept none."""
        return f"the {self.backend} {self.op} space discovers no variants"

    def prune(self, params: Params, problem: Problem, dtype: str, layout: str) -> str | None:
        """Why ``params`` cannot run ``problem`` (None when it can)."""
        return None

    def order(
        self, candidates: list[Params], problem: Problem, dtype: str, layout: str
    ) -> list[Params]:
        """The candidates (already pruned for ``problem``) in the order to try them.

        A space may put its likely winners for this shape first so that a capped search sees
        them; the default keeps ``enumerate``'s order. Must be deterministic."""
        return candidates

    @abstractmethod
    def name(self, params: Params, dtype: str, layout: str) -> str:
        """Readable procedural name, e.g. ``gemm_f16_rcr_128x256x64_c2x1_coop``."""

    def template_for(self, params: Params) -> str:
        """The template of ``params`` (a space whose template depends on the arch overrides
        this; ``template`` stays the default)."""
        return self.template

    def render_context(self, params: Params, dtype: str, layout: str) -> dict[str, Any]:
        """Values handed to the template: the params, dtype, layout and the variant's name."""
        name = self.name(params, dtype, layout)
        return {**params, "dtype": dtype, "layout": layout, "name": name}

    def flags(self, params: Params, arch: str) -> tuple[str, ...]:
        """Extra compiler flags of this variant (beyond the backend's base flags)."""
        return ()
