"""A CUDA variant's artifact is its own ``kernel.so`` from the compile cache: the rendered source
is self-contained (the ABI header is inlined by Jinja) and exports the tunehub C ABI; a
cuBLASLt or cuDNN family's source bakes the chosen algorithm in. This module names what a
rebuild needs: the flags building a shared object adds, the external header packages the source
includes, and the record.
"""

from __future__ import annotations

import re

from tuner.types import BuildRecord, Variant

__all__ = ["BUILD_FLAGS", "HEADER_PACKAGES", "needs_of", "cuda_record"]

#: what building a loadable shared object adds to the variant's flags (nvcc)
BUILD_FLAGS = ("-shared", "-Xcompiler", "-fPIC")
#: external header package -> the include paths (``#include <...>``) that name it
HEADER_PACKAGES: dict[str, re.Pattern[str]] = {
    "cutlass": re.compile(r"^\s*#\s*include\s*<(cutlass|cute)/", re.MULTILINE),
    "cublas": re.compile(r"^\s*#\s*include\s*<cublas(Lt|_v2)?\.h>", re.MULTILINE),
    "cudnn": re.compile(r"^\s*#\s*include\s*<cudnn[^>]*\.h>", re.MULTILINE),
}


def needs_of(source: str) -> tuple[str, ...]:
    """The external header packages a rendered source includes, in HEADER_PACKAGES order."""
    return tuple(name for name, pattern in HEADER_PACKAGES.items() if pattern.search(source))


def cuda_record(
    variant: Variant, compiler_identity: str, template_version: str, link: tuple[str, ...]
) -> BuildRecord:
    """The build record of a CUDA variant: its rendered source is the translation unit."""
    return BuildRecord(
        variant_id=variant.id,
        name=variant.name,
        op=variant.op,
        source=variant.source,
        flags=tuple(variant.flags),
        build_flags=BUILD_FLAGS,
        compiler=compiler_identity,
        compiler_name="nvcc",
        template_version=template_version,
        needs=needs_of(variant.source),
        link=link,
    )
