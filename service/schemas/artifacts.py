"""Models of built artifacts: a winner's shared object and the record that rebuilds it.

    ArtifactRef        what a best answer names: sha256, size, where to fetch it, the ABI
    VariantBuildIn     the build record a worker uploads (PUT /v1/leases/{id}/builds/{variant})
    VariantBuildOut    GET /v1/variants/{variant_id}/build
    ArtifactUploadOut  PUT /v1/leases/{id}/artifacts/{variant}: the stored artifact
    BuildUploadOut     PUT /v1/leases/{id}/builds/{variant}: the stored record

An artifact exports the tunehub C ABI (``tunehub_can_run``, ``tunehub_workspace_bytes``,
``tunehub_run``, ``tunehub_describe``; :data:`~service.schemas.names.ABI_VERSION`), is keyed
by variant id, arch and toolchain, and is content-addressed by its sha256.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from service.schemas.common import RequestModel, ResponseModel, SafeStr
from service.schemas.names import ABI_VERSION

__all__ = [
    "ABI_VERSION",
    "SHA256_PATTERN",
    "ARTIFACTS_PATH",
    "MAX_SOURCE_CHARS",
    "HeaderPackage",
    "Sha256",
    "artifact_url",
    "ArtifactRef",
    "VariantBuildIn",
    "VariantBuildOut",
    "ArtifactUploadOut",
    "BuildUploadOut",
]

#: a sha256 in lower-case hex: an artifact's digest, and every real variant id
SHA256_PATTERN = r"^[0-9a-f]{64}$"
#: where artifacts are read: ``GET {ARTIFACTS_PATH}/{sha256}``
ARTIFACTS_PATH = "/v1/artifacts"
#: a translation unit (or rendered source) in a build record has at most this many characters
MAX_SOURCE_CHARS = 2 << 20
#: external header packages a record may need
HeaderPackage = Literal["cutlass", "cublas", "cudnn"]

Sha256 = Annotated[str, Field(pattern=SHA256_PATTERN, min_length=64, max_length=64)]
#: one compiler flag (the record's flags are data: nothing the service runs)
_Flag = Annotated[SafeStr, Field(min_length=1, max_length=1000)]
#: a compiler command or a library soname: a plain file name
_FileName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.+-]{1,200}$")]
_Source = Annotated[SafeStr, Field(min_length=1, max_length=MAX_SOURCE_CHARS)]


def artifact_url(sha256: str) -> str:
    """The path an artifact is read at (relative to the service's base URL)."""
    return f"{ARTIFACTS_PATH}/{sha256}"


class ArtifactRef(ResponseModel):
    """A built artifact of a variant, as a best answer names it: fetch ``url`` (a path on the
    service) with a read token, check the bytes' sha256 and size, then load it."""

    sha256: Sha256
    size: int = Field(ge=0)
    variant_id: str
    #: the arch it was built for ("sm_90", "x86_64-avx2")
    arch: str
    #: the toolchain key it was built with (the answer's ``toolchain.key``)
    toolchain: str
    backend: str
    url: str
    #: the C ABI it exports
    abi: str = ABI_VERSION


class _BuildFields(RequestModel):
    """A build record's fields (:class:`tuner.types.BuildRecord`), defined once."""

    variant_id: Sha256
    #: the translation unit to compile (CUDA: the rendered source; CPU: the rendered source
    #: with tunehub's own headers inlined)
    source: _Source
    #: the rendered source the variant id hashes, where ``source`` wraps it (CPU); else null
    variant_source: _Source | None = None
    #: the variant's flags (part of its id)
    flags: list[_Flag] = Field(default_factory=list, max_length=64)
    #: what building a loadable shared object adds to them (-shared -fPIC)
    build_flags: list[_Flag] = Field(default_factory=list, max_length=16)
    #: the compiler's identity text (part of the id)
    compiler: SafeStr = Field(min_length=1, max_length=1000)
    #: the compiler command: "g++", "nvcc"
    compiler_name: _FileName
    template_version: SafeStr = Field(min_length=1, max_length=100)
    #: external header packages the source includes
    needs: list[HeaderPackage] = Field(default_factory=list, max_length=3)
    #: shared libraries to link, by soname (link each with -l:<soname>)
    link: list[_FileName] = Field(default_factory=list, max_length=16)


class VariantBuildIn(_BuildFields):
    """The build record a worker uploads with a variant's artifact."""


class VariantBuildOut(ResponseModel):
    """``GET /v1/variants/{variant_id}/build``: what rebuilds the variant's artifact.

    ``compiler_name build_flags flags -I<headers of needs> source -o kernel.so -l:<link>...``
    builds it on a machine whose compiler has the identity ``compiler``; the variant id is
    sha256 of the rendered source (``variant_source``, else ``source``), ``flags``,
    ``compiler`` and ``template_version`` (docs/artifacts.md)."""

    variant_id: str
    name: str
    op: str
    source: str
    variant_source: str | None = None
    flags: list[str]
    build_flags: list[str]
    compiler: str
    compiler_name: str
    template_version: str
    needs: list[str]
    link: list[str]
    created_at: datetime


class ArtifactUploadOut(ResponseModel):
    """The answer to an artifact upload: 201 stored now, 200 stored already (a retry)."""

    artifact: ArtifactRef
    stored: bool
    detail: str


class BuildUploadOut(ResponseModel):
    """The answer to a build record upload: 201 stored now, 200 stored already."""

    variant_id: str
    stored: bool
    detail: str
