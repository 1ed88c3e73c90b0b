"""Render kernel templates with Jinja2 and give each rendering its content id."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import jinja2

from tuner.spaces.base import Params, VariantSpace
from tuner.types import Variant

__all__ = [
    "TEMPLATES_DIR",
    "template_environment",
    "template_version",
    "variant_id",
    "parts_digest",
    "render_variant",
]

#: kernel_templates/ beside the packages (the repo root in a checkout or editable install)
TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "kernel_templates"


@lru_cache(maxsize=4)
def template_environment(root: str = str(TEMPLATES_DIR)) -> jinja2.Environment:
    # StrictUndefined: a template that names a value we did not pass fails loudly;
    # no autoescape: the output is C++, and only validated ints/enums are passed in.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def template_version(template: str, root: str = str(TEMPLATES_DIR)) -> str:
    """Short hash of a template and every ``_*`` file of its folder (the headers all its
    templates share). A header only some templates include is named without the ``_``
    (``grouped_gemm_dims.cuh``, ``cublaslt_discovery.cuh``): a Jinja include puts it in those
    variants' rendered source, hence their ids, and leaves the other ops' ids alone."""
    path = Path(root) / template
    digest = hashlib.sha256(path.read_bytes())
    for helper in sorted(path.parent.glob("_*")):
        digest.update(helper.read_bytes())
    return digest.hexdigest()[:12]


def variant_id(
    source: str, flags: tuple[str, ...], compiler_identity: str, template_version: str
) -> str:
    """The content id of a rendered variant: sha256 of its source, flags, compiler identity and
    template version (each followed by a NUL). The service recomputes it from a build record."""
    return parts_digest(source, "\0".join(flags), compiler_identity, template_version)


def parts_digest(*parts: str) -> str:
    """sha256 hex of ``parts``, each followed by a NUL (the variant id's and cache keys' form)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def render_variant(
    space: VariantSpace,
    params: Params,
    dtype: str,
    layout: str,
    arch: str,
    base_flags: tuple[str, ...],
    compiler_identity: str,
    root: str = str(TEMPLATES_DIR),
) -> Variant:
    """Render one variant; its id is sha256(source, flags, compiler identity, template version).

    The template version covers the shared headers beside the template (``_*``), which a
    rendered source may only name in an ``#include``: editing one gives every variant a new id.
    """
    source = (
        template_environment(root)
        .get_template(space.template_for(params))
        .render(**space.render_context(params, dtype, layout))
    )
    flags = tuple(base_flags) + tuple(space.flags(params, arch))
    return Variant(
        op=space.op,
        name=space.name(params, dtype, layout),
        params=dict(params),
        source=source,
        flags=flags,
        id=variant_id(source, flags, compiler_identity, template_version(space.template, root)),
    )
