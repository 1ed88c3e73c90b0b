"""Built artifacts: a variant's loadable shared object, its digest and the record that rebuilds it.

    built = build_artifact(backend, variant)     # BuiltArtifact(path, sha256, size, record)
    problem = record_problem(built.record)       # None, or why a record does not add up

Every artifact exports the tunehub C ABI (:data:`tuner.types.ABI_VERSION`): CUDA variants
through ``kernel_templates/cuda/_tunehub_abi.cuh``, CPU variants through the shim
``kernel_templates/cpu/_tunehub_abi.h``. The per-backend part is :meth:`Backend.artifact
<tuner.backends.base.Backend.artifact>`; this module is the one call site, and the place that
checks a record received from elsewhere (the service checks every uploaded one).
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from tuner.errors import InvalidRequestError, TunerError
from tuner.registry import load_space
from tuner.render import TEMPLATES_DIR, template_version, variant_id
from tuner.types import BuildRecord, BuiltArtifact, Variant

if TYPE_CHECKING:
    from tuner.backends.base import Backend

__all__ = ["build_artifact", "file_sha256", "record_problem"]


def file_sha256(path: str | os.PathLike[str]) -> tuple[str, int]:
    """(sha256 hex, size in bytes) of a file."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest(), handle.tell()


def build_artifact(backend: Backend, variant: Variant) -> BuiltArtifact:
    """``variant``'s artifact on ``backend`` (built, or from the compile cache) with its sha256,
    size and build record. Raises ToolchainError when it cannot be built."""
    path, record = backend.artifact(variant)
    sha256, size = file_sha256(path)
    return BuiltArtifact(backend.name, str(path), sha256, size, record)


def _template_version_here(op: str, backend: str) -> str | None:
    """The template version this checkout would give ``op`` on ``backend`` (None: unknown)."""
    try:
        return template_version(load_space(op, backend).template, str(TEMPLATES_DIR))
    except (InvalidRequestError, TunerError, OSError):
        return None


def record_problem(record: BuildRecord, backend: str) -> str | None:
    """Why ``record`` (of a variant measured on ``backend``) does not add up, or None.

    Its rendered source (``variant_source``, else ``source``), flags, compiler and template
    version must hash to its variant id. A CUDA artifact compiles the rendered source itself. A
    CPU artifact's translation unit wraps it: the unit must be the one
    :func:`~tuner.backends.cpu_artifact.standalone_source` makes of it where this checkout's CPU
    templates have the record's template version (then every byte is known), and must at least
    contain the rendered source elsewhere.
    """
    rendered = record.source if record.variant_source is None else record.variant_source
    computed = variant_id(rendered, record.flags, record.compiler, record.template_version)
    if computed != record.variant_id:
        return (
            f"the record's rendered source, flags, compiler and template version hash to "
            f"{computed}, not to the variant id {record.variant_id}"
        )
    if backend != "cpu":
        if record.variant_source not in (None, record.source):
            return f"a {backend} artifact compiles its rendered source: variant_source must be null"
        return None
    if record.variant_source is None:
        return "a CPU record needs variant_source, the rendered source its unit wraps"
    # here, not at the top: the service checks records, and it imports no backend module
    # (tests/tuner/test_capabilities_and_host.py)
    from tuner.backends.cpu_artifact import embedded_body, standalone_source

    if _template_version_here(record.op, "cpu") == record.template_version:
        try:
            expected = standalone_source(
                record.name, record.variant_id, record.variant_source, TEMPLATES_DIR / "cpu"
            )
        except TunerError as exc:
            return str(exc)
        if record.source != expected:
            return "the translation unit is not the one tunehub makes of the rendered source"
        return None
    if embedded_body(record.variant_source) not in record.source:
        return "the translation unit does not contain the rendered source"
    return None
