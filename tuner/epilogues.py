"""Fused epilogues of gemm and conv2d (issue 26, item 3): the names, which op takes which, and
the float32 reference every backend verifies against.

    out = act(acc + bias)                    bias, bias_relu, bias_gelu, bias_silu
    out[:, j] = silu(acc[:, j] + bias[j]) * (acc[:, j + n/2] + bias[j + n/2])    gated_silu

``acc`` is the plain product (gemm C[m, n], conv2d y[n, p, q, k]); ``bias`` has one value per
output column (gemm: n, conv2d: k), stored in the problem's dtype and handed to a kernel as
its third input, after a/b (x/w); ``tuner.reference.apply_epilogue`` computes it. GELU is the
exact (erf) form, as ``torch.nn.GELU()``.

gated_silu is gemm only: W holds the gate half in its first n/2 columns and the up half in the
last n/2 (``torch.cat([W_gate, W_up])`` of the two [n/2, k] weights, as vLLM's merged
``gate_up_proj``), the bias likewise, and the output is C[m, n/2]. ``n`` stays the full N of the
product, so the problem's dims are those of the GEMM that runs.

The epilogue is a compile-time property of a variant: a space lists a family's params once
per epilogue it fuses, with ``params["epilogue"]`` set only when it is not ``none`` (so every
unfused variant keeps its params, name and id). :func:`params_epilogue` reads it back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal, get_args

__all__ = [
    "Epilogue",
    "EPILOGUES",
    "NONE",
    "GEMM_EPILOGUES",
    "CONV2D_EPILOGUES",
    "EPILOGUES_OF_OP",
    "ACTIVATIONS",
    "activation_of",
    "params_epilogue",
    "with_epilogues",
    "output_columns",
    "name_suffix",
]

Epilogue = Literal["none", "bias", "bias_relu", "bias_gelu", "bias_silu", "gated_silu"]
EPILOGUES: tuple[str, ...] = get_args(Epilogue)
NONE = "none"
GEMM_EPILOGUES: tuple[str, ...] = EPILOGUES
CONV2D_EPILOGUES: tuple[str, ...] = tuple(e for e in EPILOGUES if e != "gated_silu")
#: the ops with an epilogue field and the epilogues each takes
EPILOGUES_OF_OP: dict[str, tuple[str, ...]] = {
    "gemm": GEMM_EPILOGUES,
    "conv2d": CONV2D_EPILOGUES,
}
#: epilogue -> the activation after the bias (``none`` for a bias alone; gated_silu: silu)
ACTIVATIONS: dict[str, str] = {
    "bias": "none",
    "bias_relu": "relu",
    "bias_gelu": "gelu",
    "bias_silu": "silu",
    "gated_silu": "silu",
}


def activation_of(epilogue: str) -> str:
    """The activation an epilogue applies (``none`` for none and bias)."""
    return ACTIVATIONS.get(epilogue, NONE)


def params_epilogue(params: dict[str, Any]) -> str:
    """The epilogue a variant's params fuse (``none`` when they name none)."""
    return str(params.get("epilogue", NONE))


def with_epilogues(
    params: Iterable[dict[str, Any]], epilogues: Iterable[str]
) -> Iterator[dict[str, Any]]:
    """Each params dict as is (epilogue none), then once per fused epilogue in ``epilogues``."""
    base = list(params)
    yield from base
    for epilogue in epilogues:
        if epilogue != NONE:
            yield from ({**p, "epilogue": epilogue} for p in base)


def output_columns(epilogue: str, columns: int) -> int:
    """Output columns of a product with ``columns`` columns (gated_silu halves them)."""
    return columns // 2 if epilogue == "gated_silu" else columns


def name_suffix(params: dict[str, Any]) -> str:
    """``_bias_relu`` etc. for a fused variant's procedural name; empty when unfused."""
    epilogue = params_epilogue(params)
    return "" if epilogue == NONE else f"_{epilogue}"
