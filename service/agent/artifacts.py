"""After a task's final upload: build and upload the artifacts of what it found.

    share_artifacts(client, backend, space, result, lease_id, reply)

The task's winner (``ResultsOut.winner``) gets its artifact built (:func:`tuner.artifacts.
build_artifact`: the cached kernel.so on CUDA, one standalone compile on the CPU) and uploaded
with its build record, for the lease that measured it. One lookup of the stored best answer for
the problem on this device and toolchain tells what is there already: the winner's artifact is
not built again when the answer names it, and when the stored best is another variant (an
incumbent kept inside the tie band) without an artifact, and this lease measured it with
outcome ok, its artifact is uploaded too.

Nothing here fails the task: a build or upload that fails is logged, and the worker goes on.
"""

from __future__ import annotations

import logging

from service.agent.wire import build_in
from service.client import ApiError, ClientError, TunehubClient
from service.schemas.configs import BestConfigOut, ConfigQuery
from service.schemas.worker import ResultsOut
from tuner.artifacts import build_artifact
from tuner.backends.base import Backend
from tuner.spaces.base import VariantSpace
from tuner.types import BenchResult, Outcome, ProblemResult, TuneRequest

__all__ = ["share_artifacts"]

log = logging.getLogger(__name__)


def _stored_best(client: TunehubClient, result: ProblemResult) -> BestConfigOut | None:
    """The stored best answer of exactly this problem, device and toolchain (None: none)."""
    request = result.request
    query = ConfigQuery.model_validate(
        {
            "op": request.op,
            "dtype": request.dtype,
            "layout": request.layout,
            "device": result.device.key(),
            "toolchain": result.toolchain.key(),
            "problem": request.problem.dims(),
        }
    )
    try:
        answer = client.best_config(query)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return answer if answer.exact else None


def _share_one(
    client: TunehubClient,
    backend: Backend,
    space: VariantSpace,
    request: TuneRequest,
    arch: str,
    lease_id: str,
    measured: BenchResult,
) -> None:
    variant = backend.render(space, measured.params, request.dtype, request.layout, arch)
    if variant.id != measured.variant_id:
        log.warning(
            "lease %s: %s renders to variant %s here, not %s: no artifact",
            lease_id,
            measured.variant_name,
            variant.id[:12],
            measured.variant_id[:12],
        )
        return
    built = build_artifact(backend, variant)
    answer = client.upload_artifact(lease_id, build_in(built.record), built.path)
    log.info(
        "lease %s: artifact of %s (%d bytes, sha256 %s) %s",
        lease_id,
        variant.name,
        built.size,
        built.sha256[:12],
        "uploaded" if answer.stored else "was stored already",
    )


def share_artifacts(
    client: TunehubClient,
    backend: Backend,
    space: VariantSpace,
    result: ProblemResult,
    lease_id: str,
    reply: ResultsOut | None,
) -> None:
    """Upload the artifacts of the task's winner and of a stored best without one (see the
    module's doc); every failure is logged, none is raised."""
    if reply is None or reply.winner is None:
        return
    verified = {r.variant_id: r for r in result.results if r.outcome is Outcome.OK}
    wanted = [reply.winner.variant_id]
    try:
        best = _stored_best(client, result)
    except ClientError as exc:
        log.warning("lease %s: cannot read the stored best answer: %s", lease_id, exc)
        best = None
    if best is not None:
        if best.artifact is not None:  # its variant has one: nothing to do for it
            wanted = [v for v in wanted if v != best.artifact.variant_id]
        elif best.variant_id not in wanted:
            wanted.append(best.variant_id)
    for variant_id in wanted:
        measured = verified.get(variant_id)
        if measured is None:
            continue  # not measured (verified) by this lease: the service would refuse it
        try:
            _share_one(
                client, backend, space, result.request, result.device.arch, lease_id, measured
            )
        except Exception as exc:  # never fails the task: the answer is stored already
            log.warning(
                "lease %s: no artifact for %s: %s: %s",
                lease_id,
                measured.variant_name,
                type(exc).__name__,
                exc,
            )
