"""The PyTorch ops' configuration: where answers come from and how winners are loaded
(:class:`TorchConfig`, read from the environment until ``configure`` changes it), and what the
runtime asks of the client that answers (:class:`ArtifactClient`)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from service.client import Cached
from service.integrations._client_env import client_cache_dir
from service.integrations._torch_build import DEFAULT_BUILD_TIMEOUT_S
from service.schemas.configs import MAX_NEAREST_DISTANCE, BestConfigOut, ConfigQuery

__all__ = ["LOAD_POLICIES", "ArtifactClient", "TorchConfig", "config_from_env"]

#: the ops' warnings keep the one logger they have always had (docs/torch.md names it)
log = logging.getLogger("service.integrations._torch_runtime")

LOAD_POLICIES = ("artifact", "source", "auto")


class ArtifactClient(Protocol):
    """What the runtime asks of :class:`service.client.TunehubClient`."""

    def best(self, query: ConfigQuery) -> Cached[BestConfigOut]: ...

    def best_from_cache(self, query: ConfigQuery) -> Cached[BestConfigOut] | None: ...

    def fetch_artifact(self, ref: Any, dest_dir: Path) -> Path: ...

    def variant_build(self, variant_id: str) -> Any: ...


@dataclass(frozen=True)
class TorchConfig:
    """Where answers come from and how winners are loaded (see ``configure``)."""

    server: str | None = None
    token: str | None = None
    cache_dir: Path = Path(".")
    #: artifact: download (sha256 checked) and load; source: compile the variant's source
    #: here; auto: the artifact, else the source
    load: str = "auto"
    max_distance: float = MAX_NEAREST_DISTANCE
    #: ask the service even when the on-disk cache has an answer (a fresher winner)
    revalidate: bool = False
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S


def config_from_env() -> TorchConfig:
    load = os.environ.get("TUNEHUB_TORCH_LOAD", "auto")
    if load not in LOAD_POLICIES:
        log.warning("TUNEHUB_TORCH_LOAD=%r is not one of %s; using auto", load, LOAD_POLICIES)
        load = "auto"
    distance = MAX_NEAREST_DISTANCE
    if raw := os.environ.get("TUNEHUB_TORCH_MAX_DISTANCE"):
        try:
            distance = float(raw)
        except ValueError:
            log.warning("TUNEHUB_TORCH_MAX_DISTANCE=%r is not a number; using %g", raw, distance)
    return TorchConfig(
        server=os.environ.get("TUNEHUB_SERVER") or None,
        token=os.environ.get("TUNEHUB_TOKEN") or None,
        cache_dir=client_cache_dir(),
        load=load,
        max_distance=distance,
    )
