"""The discovery half shared by the CUDA spaces that also take a vendor library's configs
(cuBLASLt algorithms in the gemm space, cuDNN engine configs in the conv2d space, and cuBLASLt
algorithms of 1x1 conv2d layers): the backend runs the space's discovery builds for a problem
on the device (``Backend.discover``), the space checks and labels what they find."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tuner.problems import Problem
from tuner.spaces._sm90_gemm_estimate import DEFAULT_SM_COUNT
from tuner.spaces.base import Params, VariantSpace

__all__ = ["Discovery", "VendorConfigs", "VendorDiscoverySpace"]


@dataclass(frozen=True)
class Discovery:
    """One discovery build the backend runs for a problem: its params (a ``*_discover``
    family of the space), the vendor library it links (``cublas`` or ``cudnn``, as
    ``tuner.backends.cuda`` names them) and how many configs it asks the vendor for."""

    params: Params
    library: str
    requested: int


class VendorConfigs(Protocol):
    """What a vendor module (cuda_gemm_cublaslt, cuda_conv2d_cudnn) offers a space."""

    def invalid_reason(self, params: Mapping[str, Any]) -> str | None: ...

    def params_from_discovery(self, found: Iterable[Mapping[str, Any]]) -> list[Params]: ...


class VendorDiscoverySpace(VariantSpace):
    """A space whose vendor configs are discovered: ``params["library"]`` marks them."""

    #: ``params["library"]`` of a discovered config
    vendor_library: str
    #: what the vendor's configs are called, in the reason other params are refused
    vendor_configs: str
    vendor: VendorConfigs
    #: the build that finds the vendor's configs of a shape (the backend runs it)
    discovery_params: Params
    #: the vendor library that build links (``cublas`` or ``cudnn``)
    discovery_library: str = "cublas"
    #: how many configs discovery asks the vendor for
    requested_algos: int = 32
    #: vendor libraries of the builds ``discoveries`` adds for some problems (with
    #: ``discovery_library``, their versions key the toolchain)
    other_vendor_libraries: tuple[str, ...] = ()
    #: SMs that ``order`` fills (H100 SXM / H200 by default; pass the device's count if known)
    sm_count: int = DEFAULT_SM_COUNT

    def __init__(self, sm_count: int | None = None) -> None:
        if sm_count is not None:
            if sm_count < 1:
                raise ValueError(f"sm_count must be positive, not {sm_count}")
            self.sm_count = sm_count

    def discovered_reason(self, params: Params, dtype: str, layout: str, arch: str) -> str | None:
        if params.get("library") != self.vendor_library:
            return f"only {self.vendor_configs} are discovered; other params come from enumerate"
        self.enumerate(dtype, layout, arch)  # InvalidRequestError for a dtype/layout/arch it lacks
        return self.vendor.invalid_reason({k: v for k, v in params.items() if k != "library"})

    def discoveries(self, problem: Problem) -> list[Discovery]:
        """The discovery builds to run for ``problem``, in order: the first one's first config
        is the vendor default (a space may add builds for some problems)."""
        return [Discovery(self.discovery_params, self.discovery_library, self.requested_algos)]

    def from_discovery(
        self, found: list[dict[str, Any]], discovery: Discovery | None = None
    ) -> list[Params]:
        """The vendor's params from a discovery build's answer, vendor default first
        (``discovery``: which of :meth:`discoveries` answered; None: the first)."""
        return [
            {"library": self.vendor_library, **p} for p in self.vendor.params_from_discovery(found)
        ]
