"""The GEMM discovery build's enumeration beyond the heuristic, run without a GPU: the rendered
discovery source linked against a stand-in for libcublasLt (``fakes/fake_cublaslt.cpp``, its
model described there) and called through ctypes as the harness calls it."""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.render import render_variant
from tuner.spaces import cuda_gemm_cublaslt as lt
from tuner.spaces.cuda_gemm import CudaGemmSpace
from tuner.vendor_paths import cublas_paths

pytestmark = pytest.mark.nvcc

FAKE = Path(__file__).parent / "fakes" / "fake_cublaslt.cpp"
DIMS = (2048, 4096, 4096)


def _source() -> str:
    space = CudaGemmSpace()
    params = space.discovery_params
    return render_variant(space, params, "f16", "rcr", "sm_90", (), "nvcc test").source


def _bound(name: str) -> int:
    """A bound of the discovery build, read from its source (where it is defined)."""
    pattern = rf"constexpr \w+ {name} = (?:size_t\{{(\d+)\}} << (\d+)|(\d+));"
    match = re.search(pattern, _source())
    assert match, name
    base, shift, plain = match.groups()
    return int(plain) if plain is not None else int(base) << int(shift)


@pytest.fixture(scope="module")
def discovery(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    include = require_toolchain(cublas_paths).include
    folder = tmp_path_factory.mktemp("fake_lt")
    source = folder / "discover.cu"
    source.write_text(_source())
    library = folder / "discover.so"
    command = ["nvcc", "-std=c++17", "-shared", "-Xcompiler", "-fPIC,-Wall", f"-I{include}",
               str(source), str(FAKE), "-o", str(library)]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lib = ctypes.CDLL(str(library))
    lib.tunehub_discover.restype = ctypes.c_int
    lib.tunehub_discover.argtypes = [
        ctypes.POINTER(ctypes.c_int64),
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.fake_checks.restype = ctypes.c_int
    return lib


def _discover(lib: ctypes.CDLL, buffer_bytes: int = 1 << 20) -> tuple[int, list[dict]]:
    dims = (ctypes.c_int64 * 3)(*DIMS)
    buf = ctypes.create_string_buffer(buffer_bytes)
    count = lib.tunehub_discover(dims, 3, lt.REQUESTED_ALGOS, buf, buffer_bytes)
    return count, (json.loads(buf.value.decode()) if count >= 0 else [])


def _key(item: dict) -> tuple:
    return tuple(item[k] for k in lt.ATTRIBUTES)


def test_the_heuristic_picks_come_first_then_checked_enumerated_configs(discovery) -> None:
    checks_before = discovery.fake_checks()
    count, found = _discover(discovery)
    assert count == len(found)
    picks, extras = found[:3], found[3:]
    expected = [(24, 1, 7), (23, 1, 4), (18, 2, 1)]
    assert [(p["tile"], p["splitk"], p["custom"]) for p in picks] == expected
    assert all(p["source"] == "heuristic" and p["exact"] for p in picks)
    assert extras and all(e["source"] == "enumerated" for e in extras)
    keys = [_key(item) for item in found]
    assert len(keys) == len(set(keys)), "an enumerated config repeats one already found"
    # what the fake's AlgoInit or AlgoCheck refuses never appears
    assert not any(e["algo"] == 99 for e in extras)
    assert not any(e["tile"] == 209 or e["cluster_shape"] == 6 or e["splitk"] == 8 for e in extras)
    assert not any(e["algo"] == 66 and e["tile"] == 0 for e in extras)
    assert all(e["workspace"] <= _bound("kMaxWorkspace") for e in extras)
    assert not any(e["algo"] == 6 for e in extras)  # asks for 64 MiB of workspace
    # every check is bounded: one id's grid at most kMaxChecksPerId
    id21 = [e for e in extras if e["algo"] == 21]
    per_id = _bound("kMaxChecksPerId")
    assert id21 and all(e["tile"] % 4 == 0 and e["tile"] <= per_id for e in id21)
    assert max(e["tile"] for e in id21) == per_id  # the fake lists 5000 tiles: cut at the bound
    assert all(e["stages"] == 1 and e["cluster_shape"] == 0 for e in id21)
    assert discovery.fake_checks() - checks_before <= _bound("kMaxChecks")


def test_variations_of_each_pick_vary_one_knob(discovery) -> None:
    _, found = _discover(discovery)
    extras = found[3:]
    around_first = {
        (e["splitk"], e["reduction"], e["swizzle"], e["custom"])
        for e in extras
        if (e["algo"], e["tile"], e["stages"], e["cluster_shape"]) == (66, 24, 35, 5)
    }
    assert {(2, 1, 0, 7), (2, 2, 0, 7), (4, 1, 0, 7), (4, 2, 0, 7)} <= around_first
    assert (2, 4, 0, 7) not in around_first  # OUTPUT_TYPE is not in the reduction mask
    assert (1, 0, 1, 7) in around_first  # swizzle flipped
    assert {(1, 0, 0, c) for c in range(7)} <= around_first  # every other custom option
    around_split = {
        (e["splitk"], e["reduction"])
        for e in extras
        if (e["algo"], e["tile"], e["custom"], e["cluster_shape"]) == (66, 18, 1, 4)
    }
    assert (1, 0) in around_split and (4, 2) in around_split
    # the grid of the picks' id uses the picks' stages and their cluster shapes besides AUTO
    grid = {(e["tile"], e["cluster_shape"]) for e in extras if e["algo"] == 66 and e["custom"] == 0
            and e["splitk"] == 1 and e["swizzle"] == 0}  # fmt: skip
    assert {(10, 0), (10, 3), (10, 4), (10, 5)} <= grid
    assert all(e["stages"] == 35 for e in extras if e["algo"] == 66)


def test_a_small_buffer_keeps_the_heuristic_and_drops_enumerated_items(discovery) -> None:
    _, full = _discover(discovery)
    small = len(json.dumps(full[:5], separators=(",", ":"))) + 2
    count, found = _discover(discovery, small)
    assert 3 <= count < len(full) and len(found) == count
    assert [_key(f) for f in found[:3]] == [_key(f) for f in full[:3]]
    assert _discover(discovery, 64)[0] == -1000  # not even the heuristic's picks fit
    assert _discover(discovery, 2)[0] == -1000


def test_the_space_keeps_the_picks_and_the_ranked_extras(discovery) -> None:
    _, found = _discover(discovery)
    params = CudaGemmSpace().from_discovery(found)
    assert [_key(p) for p in params[:3]] == [_key(f) for f in found[:3]]
    assert len(params) == 3 + lt.EXTRA_ALGOS
    assert len({_key(p) for p in params}) == len(params)
