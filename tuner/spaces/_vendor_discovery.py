"""The discovery half shared by the CUDA spaces that also take a vendor library's configs
(cuBLASLt algorithms in the gemm space, cuDNN engine configs in the conv2d space): the backend
finds those on the device (``Backend.discover``), the space checks and labels them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from tuner.spaces._sm90_gemm_estimate import DEFAULT_SM_COUNT
from tuner.spaces.base import Params, VariantSpace

__all__ = ["VendorConfigs", "VendorDiscoverySpace"]


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

    def from_discovery(self, found: list[dict[str, Any]]) -> list[Params]:
        """The vendor's params from the discovery build's answer, vendor default first."""
        return [
            {"library": self.vendor_library, **p} for p in self.vendor.params_from_discovery(found)
        ]
