"""A CPU variant as a standalone artifact: one self-contained translation unit, one shared object.

The timed batches put many variants in one shared object behind namespaced symbols
(:mod:`tuner.backends.cpu_batch`); an artifact holds one variant and exports the tunehub C ABI
(``tunehub_can_run``, ``tunehub_workspace_bytes``, ``tunehub_run``, ``tunehub_describe``) through
the shim ``kernel_templates/cpu/_tunehub_abi.h``. Its translation unit::

    // header comment (name, id, how to rebuild)
    #include <...>                      the variant's standard headers, hoisted
    _harness.h, _tunehub_abi.h          tunehub's own headers, inlined (no -I needed)
    namespace thv_<id16> {              the rendered source, as in a batch; its #include lines
      ...                               are blanked (line numbers stay those of the source)
    }
    th_abi_exports()                    names the variant's four functions for the shim

It is compiled with the variant's own flags plus ``-shared -fPIC`` (:data:`BUILD_FLAGS`), and
cached in the compile cache under :func:`artifact_key`. :func:`standalone_source` is
deterministic: the service rebuilds it from a build record's rendered source to check the record
where its templates are the worker's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tuner.backends.cpu_batch import symbol_prefix
from tuner.compile import CompileCache, build_variants
from tuner.errors import ToolchainError
from tuner.registry import load_space
from tuner.render import parts_digest, template_version
from tuner.types import BuildRecord, Variant

__all__ = [
    "ABI_HEADER",
    "BUILD_FLAGS",
    "artifact_key",
    "embedded_body",
    "standalone_source",
    "build_cpu_artifact",
    "cpu_artifact",
]

#: the shim that maps the CPU template contract onto the C ABI
ABI_HEADER = "_tunehub_abi.h"
#: what building a loadable artifact adds to the variant's flags
BUILD_FLAGS = ("-shared", "-fPIC")
_HARNESS = "_harness.h"
_INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.MULTILINE)
_LOCAL = re.compile(r'^\s*#\s*include\s*"([^"]+)"\s*$')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$", re.MULTILINE)


def embedded_body(source: str) -> str:
    """The rendered source as the translation unit holds it: its ``#include`` lines blanked."""
    return _INCLUDE.sub("", source)


def _inline(templates_dir: Path, name: str) -> str:
    text = _PRAGMA_ONCE.sub("", (templates_dir / name).read_text())
    return f"// ---- {name} (kernel_templates/cpu/{name}, inlined) ----\n{text.rstrip()}\n"


def standalone_source(name: str, variant_id: str, source: str, templates_dir: Path) -> str:
    """The self-contained translation unit of one CPU variant's artifact.

    Raises ToolchainError when the source includes a local header other than tunehub's own."""
    system: list[str] = []
    local: list[str] = []
    for line in _INCLUDE.findall(source):
        found = _LOCAL.match(line)
        if found is None:
            if line.strip() not in system:
                system.append(line.strip())
        elif found.group(1) not in local:
            local.append(found.group(1))
    unknown = [h for h in local if h != _HARNESS]
    if unknown:
        raise ToolchainError(f"{name}: includes {unknown}, which an artifact cannot inline")
    prefix = symbol_prefix(variant_id)
    parts = [
        f"// tunehub CPU artifact: {name} (variant {variant_id})\n"
        "// One translation unit, nothing to include but the C++ standard library: build it\n"
        "// with the record's flags plus -shared -fPIC. It exports the tunehub C ABI\n"
        "// (tunehub_can_run, tunehub_workspace_bytes, tunehub_run, tunehub_describe).\n",
        *(f"{line}\n" for line in system),
        _inline(templates_dir, _HARNESS),
        _inline(templates_dir, ABI_HEADER),
        f"// ---- the variant's rendered source ----\nnamespace {prefix} {{\n"
        f'#line 1 "{name}.cpp"\n'
        f"{embedded_body(source)}\n"
        "inline th::PrepareFn th_prepare_fn() { return th_prepare; }\n"
        f"}}  // namespace {prefix}\n",
        "const th::abi::Exports& th_abi_exports() {\n"
        "  static const th::abi::Exports exports = {\n"
        f"      {prefix}::th_kernel_spec, {prefix}::th_buffer_bytes, {prefix}::th_kernel,\n"
        f"      {prefix}::th_prepare_fn()}};\n"
        "  return exports;\n"
        "}\n",
    ]
    return "".join(parts)


def artifact_key(source: str, flags: Sequence[str], compiler_identity: str) -> str:
    """Compile cache key of an artifact (its own: a batch entry is keyed by the variant id)."""
    return parts_digest("tunehub-cpu-artifact", source, "\0".join(flags), compiler_identity)


def build_cpu_artifact(
    cache: CompileCache,
    variant: Variant,
    source: str,
    compiler: str,
    compiler_identity: str,
    timeout_s: float,
) -> str:
    """Compile ``source`` (:func:`standalone_source` of ``variant``) into a shared object, or
    take it from the cache; its path. Raises ToolchainError when it does not compile."""
    flags = (*variant.flags, *BUILD_FLAGS)
    unit = Variant(
        op=variant.op,
        name=f"{variant.name}.artifact",
        params=dict(variant.params),
        source=source,
        flags=flags,
        id=artifact_key(source, flags, compiler_identity),
    )

    def make_argv(src: Path, output: Path, unit_flags: Sequence[str]) -> list[str]:
        # no -I: the unit must be self-contained, as the record promises
        return [compiler, *unit_flags, str(src), "-o", str(output)]

    built = build_variants(
        cache, [unit], make_argv, source_name="artifact.cpp", workers=1, timeout_s=timeout_s
    )[unit.id]
    if not built.ok or built.artifact is None:
        raise ToolchainError(f"the artifact of {variant.name} did not build: {built.log[-2000:]}")
    return built.artifact


def cpu_artifact(
    variant: Variant,
    cache: CompileCache,
    templates_dir: Path,
    *,
    compiler: str,
    compiler_name: str,
    compiler_identity: str,
    timeout_s: float,
) -> tuple[str, BuildRecord]:
    """The artifact of a CPU variant (built or cached) and the record that rebuilds it."""
    source = standalone_source(variant.name, variant.id, variant.source, templates_dir)
    path = build_cpu_artifact(cache, variant, source, compiler, compiler_identity, timeout_s)
    space = load_space(variant.op, "cpu")
    record = BuildRecord(
        variant_id=variant.id,
        name=variant.name,
        op=variant.op,
        source=source,
        flags=tuple(variant.flags),
        build_flags=BUILD_FLAGS,
        compiler=compiler_identity,
        compiler_name=compiler_name,
        template_version=template_version(space.template, str(templates_dir.parent)),
        variant_source=variant.source,
    )
    return path, record
