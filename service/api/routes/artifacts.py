"""Built artifacts: a worker uploads a winner's shared object and its build record; anyone who
may read fetches the bytes by sha256 and the record by variant id.

    PUT /v1/leases/{lease_id}/builds/{variant_id}      build record (JSON), worker token
    PUT /v1/leases/{lease_id}/artifacts/{variant_id}   the bytes (octet-stream), worker token,
                                                       ?sha256=&size= as the worker computed them
    GET /v1/artifacts/{sha256}                         the bytes (ETag: the sha256)
    GET /v1/variants/{variant_id}/build                the build record

Who may upload what is :mod:`service.store.artifacts`; where the bytes go is
:mod:`service.store.blobs`. The upload is checked before its body is read, the body is hashed
while it is written to a private file, and only bytes whose sha256 and size are the declared
ones are published. docs/artifacts.md is the user's view.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.api.deps import SessionDep, require_read, require_scope
from service.api.openapi import described
from service.errors import BodyTooLarge, InvalidInput, NotFound
from service.schemas.artifacts import (
    SHA256_PATTERN,
    ArtifactRef,
    ArtifactUploadOut,
    BuildUploadOut,
    VariantBuildIn,
    VariantBuildOut,
)
from service.settings import Settings
from service.store.artifacts import (
    ArtifactPlan,
    artifact_by_sha,
    build_out,
    plan_artifact,
    record_artifact,
    store_build,
)
from service.store.blobs import ArtifactStore
from service.store.models import ApiToken

__all__ = ["router", "UPLOAD_PATH"]

router = APIRouter(tags=["artifacts"])

#: the artifact upload's path: its body has its own size limit (TUNEHUB_MAX_ARTIFACT_BYTES)
UPLOAD_PATH = re.compile(r"^/v1/leases/[^/]+/artifacts/[^/]+$")
#: an artifact never changes: its address is its content
_IMMUTABLE = "public, max-age=31536000, immutable"

WorkerToken = Annotated[ApiToken, Depends(require_scope("worker"))]
VariantId = Annotated[
    str, Path(pattern=SHA256_PATTERN, description="a variant id: 64 lower-case hex digits")
]
Sha256Path = Annotated[
    str, Path(pattern=SHA256_PATTERN, description="the artifact's sha256, lower-case hex")
]
_BINARY = {"schema": {"type": "string", "format": "binary"}}


def _lease_errors(extra: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    answers = {
        403: "another token's lease, or a variant this lease did not measure",
        404: "unknown lease",
        409: "the lease is no longer held, or the variant did not verify",
    }
    answers.update(extra)
    return described(answers)


@router.put(
    "/v1/leases/{lease_id}/builds/{variant_id}",
    status_code=201,
    response_model=BuildUploadOut,
    responses={
        200: {"model": BuildUploadOut, "description": "a record is stored already (kept)"},
        **_lease_errors({}),
    },
)
def upload_build(
    lease_id: str, variant_id: VariantId, body: VariantBuildIn, session: SessionDep,
    token: WorkerToken,
) -> JSONResponse:  # fmt: skip
    """Store the build record of a variant this lease measured with outcome ok (before its
    artifact). The first record of a variant id stays: the id hashes every part that matters."""
    stored = store_build(session, lease_id, variant_id, body, token)
    session.commit()
    answer = BuildUploadOut(
        variant_id=variant_id,
        stored=stored,
        detail="stored" if stored else "a build record of this variant is stored already",
    )
    return JSONResponse(answer.model_dump(mode="json"), status_code=201 if stored else 200)


def _plan(
    maker: sessionmaker[Session],
    lease_id: str,
    variant_id: str,
    sha256: str,
    token: ApiToken,
    settings: Settings,
) -> ArtifactPlan:
    with maker() as session:
        return plan_artifact(
            session, lease_id, variant_id, sha256, token, settings.max_artifacts_per_lease
        )


def _record(
    maker: sessionmaker[Session], plan: ArtifactPlan, sha256: str, size: int, settings: Settings
) -> tuple[ArtifactRef, bool]:
    with maker() as session:
        answer = record_artifact(
            session,
            plan,
            sha256,
            size,
            ArtifactStore.relative(sha256),
            settings.max_artifacts_per_lease,
        )
        session.commit()
        return answer


@router.put(
    "/v1/leases/{lease_id}/artifacts/{variant_id}",
    status_code=201,
    response_model=ArtifactUploadOut,
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/octet-stream": _BINARY}}
    },
    responses={
        200: {"model": ArtifactUploadOut, "description": "the same bytes are stored already"},
        **_lease_errors(
            {
                409: "the lease is no longer held, the variant did not verify or has no build "
                "record, other bytes hold its key, or the lease stored its most artifacts",
                413: "the artifact is over TUNEHUB_MAX_ARTIFACT_BYTES",
            }
        ),
    },
)
async def upload_artifact(
    request: Request,
    lease_id: str,
    variant_id: VariantId,
    sha256: Annotated[str, Query(pattern=SHA256_PATTERN, description="sha256 of the body")],
    size: Annotated[int, Query(ge=0, le=2**53, description="the body's length in bytes")],
    token: WorkerToken,
) -> JSONResponse:
    """Store the shared object of a variant this lease measured with outcome ok, for the
    measured device's arch and toolchain. The server hashes the body and refuses it unless
    its sha256 and size are the declared ones; the same bytes again answer 200."""
    settings: Settings = request.app.state.settings
    limit = settings.max_artifact_bytes
    if size > limit:
        raise BodyTooLarge(f"artifact of {size} bytes is over the limit of {limit} bytes")
    maker = request.app.state.sessionmaker
    plan = await run_in_threadpool(_plan, maker, lease_id, variant_id, sha256, token, settings)
    store = ArtifactStore(settings.artifact_root)
    staged = await store.receive(request.stream(), limit)
    try:
        if staged.sha256 != sha256 or staged.size != size:
            field = "sha256" if staged.sha256 != sha256 else "size"
            raise InvalidInput(
                ["query", field],
                f"the body has sha256 {staged.sha256} and {staged.size} bytes; the upload "
                f"declared sha256 {sha256} and {size} bytes",
            )
        await run_in_threadpool(store.publish, staged)
    finally:
        staged.discard()
    ref, stored = await run_in_threadpool(_record, maker, plan, sha256, size, settings)
    answer = ArtifactUploadOut(
        artifact=ref,
        stored=stored,
        detail="stored" if stored else "the same artifact is stored already",
    )
    return JSONResponse(answer.model_dump(mode="json"), status_code=201 if stored else 200)


@router.get(
    "/v1/artifacts/{sha256}",
    dependencies=[Depends(require_read)],
    response_class=Response,
    responses={
        200: {"content": {"application/octet-stream": _BINARY}, "description": "the bytes"},
        304: {"description": "the client holds these bytes (If-None-Match names the sha256)"},
        404: {"description": "no artifact with this sha256"},
    },
)
def get_artifact(request: Request, sha256: Sha256Path, session: SessionDep) -> Response:
    """An artifact's bytes. Check their sha256 (and size) before loading them; the ETag is
    the sha256, so an ``If-None-Match`` naming it answers 304."""
    row = artifact_by_sha(session, sha256)
    session.commit()  # the connection goes back to the pool before the file is sent
    settings: Settings = request.app.state.settings
    path = ArtifactStore(settings.artifact_root).path(row.sha256)
    if not path.is_file():
        raise NotFound(
            f"artifact {sha256} is recorded but its file is missing from the artifact store "
            f"(TUNEHUB_ARTIFACT_DIR); a worker's next upload of it restores it"
        )
    etag = f'"{sha256}"'
    headers = {"ETag": etag, "Cache-Control": _IMMUTABLE}
    wanted = request.headers.get("if-none-match")
    if wanted is not None:
        tags = {t.strip().removeprefix("W/") for t in wanted.split(",")}
        if etag in tags or "*" in tags:
            return Response(status_code=304, headers=headers)
    return FileResponse(path, media_type="application/octet-stream", headers=headers)


@router.get(
    "/v1/variants/{variant_id}/build",
    response_model=VariantBuildOut,
    dependencies=[Depends(require_read)],
    responses={404: {"description": "no build record for this variant"}},
)
def get_build(variant_id: VariantId, session: SessionDep) -> VariantBuildOut:
    """What rebuilds a variant's artifact on a machine with the same toolchain: the
    translation unit, flags, compiler identity, template version, external headers and
    libraries (docs/artifacts.md says how to rebuild and check it)."""
    return build_out(session, variant_id)
