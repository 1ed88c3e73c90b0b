"""Capabilities in one table, reached by delegation; host identities for confirmation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tuner.stand_ins import STAND_IN_GPU, StandInBackend
from tuner.backends.cpu import CpuBackend
from tuner.backends.slot import BuildCoordinator, SlotBackend, SlotSpec
from tuner.capabilities import CAPABILITIES, Capabilities, capabilities_of
from tuner.errors import InvalidRequestError
from tuner.host import device_uid, host_identity, machine_id
from tuner.types import DeviceInfo, EngineConfig

REPO = Path(__file__).resolve().parents[2]


def test_backends_answer_from_the_table_and_the_slot_wrapper_delegates(tmp_path: Path) -> None:
    config = EngineConfig(cache_dir=str(tmp_path))
    assert CpuBackend(config).capabilities == CAPABILITIES["cpu"]
    gpu = StandInBackend(config, device=STAND_IN_GPU)
    assert gpu.capabilities.measures_energy and gpu.capabilities.compile_overlaps_measure
    slot = SlotBackend(gpu, SlotSpec("cuda", 0), BuildCoordinator(2))
    assert slot.capabilities is gpu.capabilities
    # whatever the wrapped backend can do, the slot can: nothing is copied by hand
    special = Capabilities(measures_energy=True, ci_early_stop=True)
    odd = StandInBackend(config, capabilities=special)
    assert SlotBackend(odd, SlotSpec("cpu", 0), BuildCoordinator()).capabilities is special


def test_the_table_answers_the_api_without_importing_a_backend() -> None:
    assert capabilities_of("cuda").measures_energy and not capabilities_of("cpu").measures_energy
    with pytest.raises(InvalidRequestError):
        capabilities_of("tpu")
    code = (
        "import sys, service.api.app, service.api.routes.jobs; "
        "print(sorted(m for m in sys.modules if m.startswith('tuner.backends')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_host_identity_is_the_machine_id_hashed(tmp_path: Path) -> None:
    (tmp_path / "machine-id").write_text("0123456789abcdef\n")
    assert machine_id([str(tmp_path / "absent"), str(tmp_path / "machine-id")]) == (
        "0123456789abcdef"
    )
    assert machine_id([str(tmp_path / "absent")])  # a weaker stand-in, never empty
    cpu = DeviceInfo("cpu", "Xeon", "x86_64-avx2", 8)
    one, again = host_identity([cpu], "machine-1"), host_identity([cpu], "machine-1")
    other = host_identity([cpu], "machine-2")
    assert one == again and one.fingerprint != other.fingerprint
    assert "machine-1" not in one.fingerprint and len(one.fingerprint) == 64
    # a CPU is the machine's; a GPU is its card, whichever machine id its host reports
    assert one.device_uids != other.device_uids
    card = DeviceInfo("cuda", "H200", "sm_90", 132, extra={"uuid": "GPU-1234"})
    assert device_uid(card, one.fingerprint) == device_uid(card, other.fingerprint)
    bus_only = DeviceInfo("cuda", "H200", "sm_90", 132, extra={"pci_bus_id": "0000:19:00.0"})
    assert device_uid(bus_only, one.fingerprint) != device_uid(bus_only, other.fingerprint)
