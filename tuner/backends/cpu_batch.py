"""One translation unit for many CPU variants, and the runner that times one of them.

Each rendered variant source is wrapped in ``namespace thv_<id16> { ... }`` and exported
through ``extern "C"`` functions ``thv_<id16>_{spec,buffer_bytes,kernel,prepare}``; the
``#include`` lines of every source are hoisted to the top (a standard header opened inside a
namespace would break), so ``_harness.h`` and any standard header are parsed once per batch.
Templates must therefore not ``#define`` macros: the next variant of the batch would see them.

The symbol prefix depends only on the variant id, so a cached variant is found in whichever
batch's shared object it was compiled into.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tuner.render import parts_digest
from tuner.types import Variant

__all__ = ["symbol_prefix", "batch_source", "RUNNER_SOURCE", "runner_key"]

_INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.MULTILINE)
RUNNER_SOURCE = "_runner.cpp"


def symbol_prefix(variant_id: str) -> str:
    """The C symbol prefix of a variant's exports (64 bits of its content id)."""
    return f"thv_{variant_id[:16]}"


def batch_source(variants: Sequence[Variant]) -> str:
    """One C++ source defining every variant of ``variants`` behind its own symbols."""
    includes: list[str] = []
    bodies: list[str] = []
    for variant in variants:
        for line in _INCLUDE.findall(variant.source):
            if line.strip() not in includes:
                includes.append(line.strip())
        prefix = symbol_prefix(variant.id)
        # keep line numbers of compiler messages those of the rendered source
        body = _INCLUDE.sub("", variant.source)
        bodies.append(
            f"namespace {prefix} {{\n"
            f'#line 1 "{variant.name}.cpp"\n'
            f"{body}\n"
            "inline th::PrepareFn th_prepare_fn() { return th_prepare; }\n"
            f"}}  // namespace {prefix}\n"
            'extern "C" {\n'
            f"th::KernelSpec {prefix}_spec() {{ return {prefix}::th_kernel_spec(); }}\n"
            f"const char* {prefix}_buffer_bytes(const int64_t* d, size_t* i, size_t* o) "
            f"{{ return {prefix}::th_buffer_bytes(d, i, o); }}\n"
            f"void {prefix}_kernel(const int64_t* d, const void* const* in, void* out) "
            f"{{ {prefix}::th_kernel(d, in, out); }}\n"
            f"th::PrepareFn {prefix}_prepare() {{ return {prefix}::th_prepare_fn(); }}\n"
            "}\n"
        )
    if '#include "_harness.h"' not in includes:
        includes.append('#include "_harness.h"')
    return "\n".join(includes) + "\n\n" + "\n".join(bodies)


def runner_key(templates_dir: Path, flags: Sequence[str], compiler_identity: str) -> str:
    """Cache key of the runner: its source, the harness header, flags and compiler."""
    return parts_digest(
        (templates_dir / RUNNER_SOURCE).read_text(),
        (templates_dir / "_harness.h").read_text(),
        "\0".join(flags),
        compiler_identity,
        "runner",
    )
