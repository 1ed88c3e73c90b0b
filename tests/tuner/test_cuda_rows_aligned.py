"""The row kernels' aligned instantiations (no GPU: nvcc's PTX and builds).

Every softmax and reduce kernel is instantiated twice: EDGES = false, the plain vector loop for
rows that all start Vec-aligned (k a multiple of the pack, x aligned), and EDGES = true for any
k (a scalar head and tail around the vector body). The head/tail code in every row cost the
aligned case registers and instructions (softmax at K=64-128 on the H200: 0.80-0.92x the copy
rate instead of 1.00x); these tests check that the aligned instantiation carries none of it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.tuner.cuda_helpers import require_toolchain
from tuner.backends.cuda import CudaBackend, arch_flags
from tuner.render import TEMPLATES_DIR
from tuner.spaces.cuda_reduce import CudaReduceSpace
from tuner.spaces.cuda_softmax import CudaSoftmaxSpace
from tuner.types import EngineConfig

pytestmark = pytest.mark.nvcc

#: a global load or store of one element (the vector body uses .v2 / .v4 accesses)
_SCALAR = re.compile(r"\b(ld\.global(?:\.nc)?|st\.global)\.(?:u16|b16|f32|u32|b32)\b")
_ENTRY = re.compile(r"^(?:\.visible\s+)?\.entry\s+(\S+?)\(", re.MULTILINE)


def _ptx_entries(tmp_path: Path, source: str, arch: str = "sm_90") -> dict[str, str]:
    """Mangled kernel name -> its PTX body."""
    cu, ptx = tmp_path / "kernel.cu", tmp_path / "kernel.ptx"
    cu.write_text(source)
    argv = [
        "nvcc",
        *arch_flags(arch),
        f"-I{TEMPLATES_DIR / 'cuda'}",
        "-ptx",
        "-o",
        str(ptx),
        str(cu),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = ptx.read_text()
    starts = list(_ENTRY.finditer(text))
    return {
        m.group(1): text[m.start() : starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        for i, m in enumerate(starts)
    }


def _render(space: object, params: dict, dtype: str = "f16", arch: str = "sm_90") -> str:
    backend = CudaBackend(EngineConfig(cache_dir="unused"))
    return backend.render(space, params, dtype, "row", arch).source  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "params",
    [
        {"pack": 8, "strategy": "group", "group": 4, "threads": 128, "mode": "reg"},
        {"pack": 8, "strategy": "warp", "group": 32, "threads": 128, "mode": "stream"},
        {"pack": 8, "strategy": "block", "group": 256, "threads": 256, "mode": "2pass"},
    ],
)
def test_aligned_softmax_reads_and_writes_whole_packs_only(tmp_path: Path, params: dict) -> None:
    require_toolchain(lambda: None)
    entries = _ptx_entries(tmp_path, _render(CudaSoftmaxSpace(), params))
    aligned = {name: body for name, body in entries.items() if "Lb0E" in name}
    any_k = {name: body for name, body in entries.items() if "Lb1E" in name}
    assert aligned and len(aligned) == len(any_k), sorted(entries)
    for name, body in aligned.items():
        assert not _SCALAR.findall(body), name
        assert "ld.global.nc.v4" in body and "st.global.v4" in body, name
    # the any-k instantiation keeps its scalar head and tail
    assert all(_SCALAR.findall(body) for body in any_k.values())


def test_aligned_reduce_loads_whole_packs_only(tmp_path: Path) -> None:
    require_toolchain(lambda: None)
    params = {"pack": 8, "strategy": "group", "group": 4, "threads": 128}
    entries = _ptx_entries(tmp_path, _render(CudaReduceSpace(), params))
    loads = re.compile(r"\bld\.global(?:\.nc)?\.(?:u16|b16)\b")
    aligned = [body for name, body in entries.items() if "Lb0E" in name]
    any_k = [body for name, body in entries.items() if "Lb1E" in name]
    assert len(aligned) == 2 and len(any_k) == 2  # the sum/mean and the max kinds
    assert not any(loads.findall(body) for body in aligned)
    assert all(loads.findall(body) for body in any_k)


#: one variant of each softmax mode and a reduce, per dtype, on Ampere (no clusters there) and
#: Hopper: both instantiations must build everywhere
_SOFTMAX_MODES = [
    {"pack": 2, "strategy": "group", "group": 8, "threads": 256, "mode": "reg"},
    {"pack": 4, "strategy": "group", "group": 4, "threads": 128, "mode": "stream"},
    {"pack": 2, "strategy": "block", "group": 512, "threads": 512, "mode": "smem"},
    {"pack": 2, "strategy": "warp", "group": 32, "threads": 128, "mode": "2pass"},
]
_MODES = [
    *((CudaSoftmaxSpace(), params) for params in _SOFTMAX_MODES),
    (CudaReduceSpace(), {"pack": 2, "strategy": "warp", "group": 32, "threads": 256}),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_row_kernels_build_for_every_dtype_and_arch(tmp_path: Path, arch: str, dtype: str) -> None:
    require_toolchain(lambda: None)
    backend = CudaBackend(EngineConfig(cache_dir=str(tmp_path), compile_workers=2))
    variants = [backend.render(space, params, dtype, "row", arch) for space, params in _MODES]
    if arch == "sm_90":  # the split row and the pipelined mode (16-byte packs)
        pack = 8 if dtype != "f32" else 4
        variants += [
            backend.render(
                CudaSoftmaxSpace(),
                {"pack": pack, "strategy": "cluster", "group": 2, "threads": 256, "mode": "reg"},
                dtype,
                "row",
                arch,
            ),
            backend.render(
                CudaSoftmaxSpace(),
                {"pack": pack, "strategy": "block", "group": 256, "threads": 256, "mode": "pipe"},
                dtype,
                "row",
                arch,
            ),
        ]
    builds = backend.build(variants)
    for variant in variants:
        assert builds[variant.id].ok, (variant.name, builds[variant.id].log[-2000:])
