"""Rebuilds a variant from its source (``GET /v1/variants/{id}/build``) with this machine's
compiler, for teams that choose to compile rather than load downloaded code.

The build record (``VariantBuildOut``) names the compiler (``g++`` or ``nvcc``) and its
identity, the flags, the header packages the source needs (``cutlass``, ``cublas``,
``cudnn``) and the libraries to link by soname; the command is ``compiler_name build_flags
flags -I<headers> source -o kernel.so -l:<soname>...``. A missing compiler or header package
is a :class:`BuildError` that says what to install; a local compiler of another identity is
used, with a warning. The shared object lands in
``<build_dir>/<sha256 of the record>/kernel.so`` and is reused by every later process. The
compiler runs from an argv list (never a shell) with a timeout.

The header lookups mirror tuner/cutlass_paths.py and tuner/vendor_paths.py (the integrations
may not import ``tuner``); tests/service/integrations/test_torch_build.py checks that they agree.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["BuildError", "BuildRecord", "VendorBuild", "needed_build", "build_variant"]

log = logging.getLogger(__name__)

#: seconds one compile may take (a CUTLASS sm90 instance takes 40 s on a fast host)
DEFAULT_BUILD_TIMEOUT_S = 900.0
_HINTS = {
    "cutlass": "pip install nvidia-cutlass (or tunehub[cuda])",
    "cublas": "pip install nvidia-cublas (or tunehub[vendor])",
    "cudnn": "pip install nvidia-cudnn-cu13 (or tunehub[vendor])",
}


class BuildError(Exception):
    """The variant cannot be built here: no compiler, a header package missing, or the
    compiler failed (its message's tail is in the text)."""


class BuildRecord(Protocol):
    """What the service's build record (``VariantBuildOut``) carries for a rebuild."""

    variant_id: str
    source: str
    flags: list[str]
    #: what building a loadable shared object adds (-shared -fPIC)
    build_flags: list[str]
    #: the identity of the compiler the variant was built and measured with
    compiler: str
    compiler_name: str
    needs: list[str]
    #: sonames to link (-l:<soname>)
    link: list[str]


@dataclass(frozen=True)
class VendorBuild:
    """Include dirs and linker arguments of the header packages a source needs."""

    include_dirs: tuple[str, ...] = ()
    lib_dirs: tuple[str, ...] = ()


def _package_dirs(package: str) -> list[Path]:
    spec = importlib.util.find_spec(package)
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def _cutlass() -> VendorBuild:
    for root in _package_dirs("cutlass_library"):
        base = root / "source"
        if (base / "include" / "cutlass" / "cutlass.h").is_file():
            return VendorBuild((str(base / "include"), str(base / "tools" / "util" / "include")))
    raise BuildError(f"the source needs the CUTLASS headers: {_HINTS['cutlass']}")


def _nvidia(folders: Sequence[str], header: str, library: str, need: str) -> VendorBuild:
    for root in _package_dirs("nvidia"):
        for folder in folders:
            base = root / folder
            if (base / "include" / header).is_file() and any((base / "lib").glob(library)):
                return VendorBuild((str(base / "include"),), (str(base / "lib"),))
    raise BuildError(f"the source needs the {need} headers and library: {_HINTS[need]}")


def needed_build(needs: Sequence[str]) -> VendorBuild:
    """The include and library dirs of ``needs``; BuildError naming what to install."""
    include: list[str] = []
    libs: list[str] = []
    for need in needs:
        if need == "cutlass":
            found = _cutlass()
        elif need in ("cublas", "cublaslt"):
            found = _nvidia(("cu13", "cublas"), "cublasLt.h", "libcublasLt.so.*", "cublas")
        elif need == "cudnn":
            found = _nvidia(("cudnn",), "cudnn_backend.h", "libcudnn.so.*", "cudnn")
        else:
            raise BuildError(f"the source needs {need!r}, which this tunehub cannot provide")
        include += found.include_dirs
        libs += found.lib_dirs
    return VendorBuild(tuple(include), tuple(libs))


def _record_key(record: BuildRecord) -> str:
    fields = {
        "source": record.source,
        "flags": list(record.flags),
        "build_flags": list(record.build_flags),
        "compiler": record.compiler_name,
        "identity": record.compiler,
        "needs": list(record.needs),
        "link": list(record.link),
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _argv(
    compiler: str, record: BuildRecord, vendor: VendorBuild, source: Path, output: Path
) -> list[str]:
    cuda = Path(record.compiler_name).name == "nvcc"
    argv = [compiler, *record.build_flags, *record.flags]
    if "-shared" not in argv:
        argv.append("-shared")
    if cuda and "-fPIC" not in argv:
        argv += ["-Xcompiler", "-fPIC"]
    elif "-fPIC" not in argv:
        argv.append("-fPIC")
    argv += [f"-I{d}" for d in vendor.include_dirs]
    argv += ["-o", str(output), str(source)]
    for lib in vendor.lib_dirs:
        argv += [f"-L{lib}", *(["-Xlinker", f"-rpath={lib}"] if cuda else [f"-Wl,-rpath,{lib}"])]
    return argv + [f"-l:{soname}" for soname in record.link]


def _check_identity(compiler: str, record: BuildRecord) -> None:
    """Warn when this machine's compiler is not the one the variant was measured with."""
    try:
        proc = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return
    lines = proc.stdout.strip().splitlines()
    release = [line for line in lines if "release" in line]  # nvcc's version line
    mine = (release or lines or [""])[0].strip()
    if mine and mine not in record.compiler:
        log.warning(
            "building variant %s with %s; it was measured with %s (its timing may differ)",
            record.variant_id, mine, record.compiler,
        )  # fmt: skip


def build_variant(
    record: BuildRecord, build_dir: Path, *, timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
) -> tuple[Path, bool]:
    """(path of the built shared object, whether it was built now rather than reused)."""
    if Path(record.compiler_name).name not in ("g++", "nvcc"):
        raise BuildError(f"unknown compiler {record.compiler_name!r} (expected g++ or nvcc)")
    folder = build_dir / _record_key(record)
    output = folder / "kernel.so"
    if output.is_file():
        return output, False
    compiler = shutil.which(record.compiler_name)
    if compiler is None:
        raise BuildError(f"{record.compiler_name} is not on PATH: cannot build from source")
    vendor = needed_build(record.needs)
    _check_identity(compiler, record)
    suffix = ".cu" if Path(record.compiler_name).name == "nvcc" else ".cpp"
    build_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=build_dir, prefix=".build-"))
    try:
        source = staging / f"kernel{suffix}"
        source.write_text(record.source, encoding="utf-8")
        argv = _argv(compiler, record, vendor, source, staging / "kernel.so")
        log.info("building variant %s with %s", record.variant_id, record.compiler_name)
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise BuildError(f"{record.compiler_name} took over {timeout_s:g} s") from None
        except OSError as exc:
            raise BuildError(f"cannot run {compiler}: {exc}") from None
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip()[-1500:]
            raise BuildError(f"{record.compiler_name} failed (exit {proc.returncode}): {tail}")
        try:
            os.replace(staging, folder)  # atomic: another process may have built it meanwhile
        except OSError:
            if not output.is_file():
                raise
        return output, True
    finally:
        shutil.rmtree(staging, ignore_errors=True)
