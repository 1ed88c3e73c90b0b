"""A winner's kernel library, loaded by the load policy (``TorchConfig.load``): its artifact
(the copy under ``<cache>/artifacts/<sha256>/``, else fetched with its sha256 checked) or its
source built here (the build under ``<cache>/builds/``, else built from the variant's build
record). The runtime calls :func:`load_winner` once per resolved shape."""

from __future__ import annotations

import contextlib
import logging
import re

from service.client import ClientError
from service.integrations._torch_build import BuildError, build_variant
from service.integrations._torch_config import ArtifactClient, TorchConfig
from service.integrations._torch_loader import ABI, KernelLibrary, LoadError, load_library
from service.schemas.configs import BestConfigOut

__all__ = ["NoLibrary", "load_winner"]

#: the ops' warnings keep the one logger they have always had (docs/torch.md names it)
log = logging.getLogger("service.integrations._torch_runtime")

#: ids and digests the service sends become folder names: nothing else may reach a path
_SAFE_NAME = re.compile(r"^[0-9A-Za-z_-]{1,128}$")


class NoLibrary(Exception):
    """No way the load policy allows gave a library; the message says why, per way."""


class _NoArtifact(Exception):
    """The answer has no artifact this process can load."""


def load_winner(
    answer: BestConfigOut, backend: str, config: TorchConfig, client: ArtifactClient
) -> tuple[KernelLibrary, str]:
    """(library, "artifact" | "artifact cache" | "source build" | "source build cache") of
    ``answer``'s variant for a device of ``backend``; :class:`NoLibrary` when none loads."""
    policy = config.load
    errors = []
    if policy in ("artifact", "auto"):
        try:
            return _load_artifact(answer, backend, config, client)
        except (LoadError, ClientError, OSError, _NoArtifact) as exc:
            errors.append(f"artifact: {exc}")
    if policy in ("source", "auto"):
        try:
            return _load_source(answer, config, client)
        except (LoadError, BuildError, ClientError, OSError) as exc:
            errors.append(f"source build: {exc}")
    raise NoLibrary(f"{answer.variant_name}: " + "; ".join(errors))


def _load_artifact(
    answer: BestConfigOut, backend: str, config: TorchConfig, client: ArtifactClient
) -> tuple[KernelLibrary, str]:
    ref = answer.artifact
    if ref is None:
        raise _NoArtifact("the answer names no artifact")
    if ref.abi != ABI or ref.backend != backend:
        raise _NoArtifact(f"a {ref.backend} artifact of ABI {ref.abi}, not {backend} {ABI}")
    if not _SAFE_NAME.match(ref.sha256):
        raise _NoArtifact(f"malformed sha256 {ref.sha256!r}")
    folder = config.cache_dir / "artifacts" / ref.sha256
    for present in sorted(folder.glob("*")) if folder.is_dir() else []:
        try:
            return load_library(present, ref.sha256), "artifact cache"
        except LoadError as exc:  # a partial or altered file: fetch it again
            log.warning("%s", exc)
            present.unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        path = client.fetch_artifact(ref, folder)  # ArtifactMismatch on a bad sha256
    except BaseException:
        with contextlib.suppress(OSError):
            folder.rmdir()  # nothing was kept: leave no empty folder either
        raise
    return load_library(path, ref.sha256), "artifact"


def _load_source(
    answer: BestConfigOut, config: TorchConfig, client: ArtifactClient
) -> tuple[KernelLibrary, str]:
    if not _SAFE_NAME.match(answer.variant_id):
        raise BuildError(f"malformed variant id {answer.variant_id!r}")
    builds = config.cache_dir / "builds"
    index = builds / "variants" / answer.variant_id
    try:
        built = builds / index.read_text().strip() / "kernel.so"
        if built.is_file():
            return load_library(built), "source build cache"
    except OSError:
        pass
    record = client.variant_build(answer.variant_id)
    path, _ = build_variant(record, builds, timeout_s=config.build_timeout_s)
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(path.parent.name)
    return load_library(path), "source build"
