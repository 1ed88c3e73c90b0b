"""``nn.Module`` classes whose forward runs a tunehub op (``TunehubLinear``, ...), and
:func:`patch` / :func:`unpatch`, which swap a model's layers' classes in place (re-exported by
:mod:`service.integrations.torch`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from service.integrations._torch_functional import conv2d, linear, rms_norm, softmax

__all__ = [
    "TunehubLinear",
    "TunehubConv2d",
    "TunehubSoftmax",
    "PATCHABLE",
    "patch",
    "unpatch",
]


class TunehubLinear(nn.Linear):
    """``nn.Linear`` whose forward is :func:`linear` (``patch`` swaps the class in place)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


class TunehubConv2d(nn.Conv2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding_mode != "zeros":
            return super().forward(x)
        return conv2d(x, self.weight, self.stride, self.padding, self.dilation,
                      bias=self.bias, groups=self.groups)  # fmt: skip


class TunehubSoftmax(nn.Softmax):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x, self.dim if self.dim is not None else -1)


_PATCHES: dict[str, tuple[type[nn.Module], type[nn.Module]]] = {
    "linear": (nn.Linear, TunehubLinear),
    "conv2d": (nn.Conv2d, TunehubConv2d),
    "softmax": (nn.Softmax, TunehubSoftmax),
}

if hasattr(nn, "RMSNorm"):  # torch >= 2.4

    class TunehubRMSNorm(nn.RMSNorm):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.weight is None or len(self.normalized_shape) != 1:
                return super().forward(x)
            eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
            return rms_norm(x, self.weight, eps)

    _PATCHES["rms_norm"] = (nn.RMSNorm, TunehubRMSNorm)

PATCHABLE = tuple(_PATCHES)


def patch(model: nn.Module, ops: Sequence[str] = PATCHABLE) -> nn.Module:
    """Run ``model``'s layers of exactly these types through tunehub: ``linear``
    (nn.Linear), ``conv2d`` (nn.Conv2d), ``softmax`` (nn.Softmax), ``rms_norm`` (nn.RMSNorm).
    The modules keep their parameters and state dict (their class is swapped in place);
    subclasses with a forward of their own are left alone. Returns ``model``."""
    unknown = sorted(set(ops) - set(_PATCHES))
    if unknown:
        raise ValueError(f"cannot patch {unknown}; patchable: {PATCHABLE}")
    for module in model.modules():
        for op in ops:
            base, tuned = _PATCHES[op]
            if type(module) is base:
                module.__class__ = tuned
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo :func:`patch`."""
    for module in model.modules():
        for base, tuned in _PATCHES.values():
            if type(module) is tuned:
                module.__class__ = base
    return model
