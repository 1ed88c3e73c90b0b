"""Issue 22 on the GPU: the CUDA backend's energy counter through the worker's slot wrapper,
and the card's UUID in the host identity (run on the H200 host).

    python3 -m pytest --noconftest -o addopts= -m gpu tests/gpu/test_gpu_trust.py
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gpu.gpu_helpers import GPU_MARKS
from tuner.backends.cuda import CudaBackend
from tuner.backends.slot import BuildCoordinator, SlotBackend, SlotSpec
from tuner.engine import tune
from tuner.host import device_uid, host_identity
from tuner.problems import ReduceProblem
from tuner.types import Budget, EngineConfig, TuneRequest

pytestmark = GPU_MARKS


@pytest.fixture
def slot(tmp_path: Path) -> Iterator[SlotBackend]:
    config = EngineConfig(
        cache_dir=os.environ.get("TUNEHUB_GPU_TEST_CACHE") or str(tmp_path / "cache"),
        run_timeout_s=60.0,
        bench_seconds=0.02,
        warmup_seconds=0.01,
        compile_timeout_s=300.0,
    )
    inner = CudaBackend(config, harness_python=sys.executable)
    wrapped = SlotBackend(inner, SlotSpec("cuda", 0), BuildCoordinator(config.compile_workers))
    yield wrapped
    wrapped.close()


def test_an_energy_tune_through_the_slot_wrapper_stores_joules(slot: SlotBackend) -> None:
    assert slot.capabilities.measures_energy  # delegated, not copied
    request = TuneRequest(
        "reduce",
        "f16",
        "row",
        ReduceProblem(m=65536, k=1024, kind="sum"),
        backend="cuda",
        budget=Budget(max_variants=3),
        objective="energy",
    )
    result = tune(request, slot, slot.config)
    verified = [r for r in result.results if r.ok]
    assert verified and all(r.energy_j is not None and r.energy_j > 0 for r in verified)
    least = min(r.energy_j for r in verified if r.energy_j is not None)
    winner = result.winner
    assert winner is not None and winner.energy_j is not None
    assert winner.energy_j <= least * 1.02  # the least energy, within the tie band


def test_the_card_s_uuid_identifies_the_device(slot: SlotBackend) -> None:
    device = slot.device()
    assert str(device.extra.get("uuid", "")).startswith("GPU-"), device.extra
    host = host_identity([device])
    assert device_uid(device, host.fingerprint) in host.device_uids
    # the same card seen from another machine id (a container without the host's) is the same
    assert device_uid(device, "another-machine") == device_uid(device, host.fingerprint)
