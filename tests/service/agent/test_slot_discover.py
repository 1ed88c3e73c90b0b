"""A worker slot forwards the backend's discovery (cuBLASLt candidates) to its real backend."""

from __future__ import annotations

from tuner.backends.cpu import CpuBackend
from tuner.backends.slot import BuildCoordinator, SlotBackend, SlotSpec
from tuner.problems import GemmProblem
from tuner.types import EngineConfig, TuneRequest

FOUND = [{"library": "cublaslt", "family": "cublaslt", "algo": 66}]


class _DiscoveringBackend(CpuBackend):
    def discover(self, request: TuneRequest, arch: str) -> list[dict]:
        self.asked = (request.problem, arch)
        return list(FOUND)


def test_slot_backend_forwards_discovery(tmp_path) -> None:
    inner = _DiscoveringBackend(EngineConfig(cache_dir=str(tmp_path)))
    slot = SlotBackend(inner, SlotSpec("cpu", 0), BuildCoordinator())
    request = TuneRequest(op="gemm", dtype="f16", layout="rcr", problem=GemmProblem(1, 64, 64))
    assert slot.discover(request, "sm_90") == FOUND
    assert inner.asked == (GemmProblem(1, 64, 64), "sm_90")
