"""What each backend can do, in one table that imports no backend.

    capabilities_of("cuda").measures_energy      # True: the API asks this, not the backend

A :class:`~tuner.backends.base.Backend` answers ``backend.capabilities`` from this table by
its name; a wrapper (the worker's slot backend) delegates to the backend it wraps, so a
capability added here reaches every path that runs a backend without being copied by hand.
The API validates a job (``objective: energy``) against this table: answering one boolean
must not import the CUDA backend and the modules it pulls in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from tuner.errors import InvalidRequestError
from tuner.registry import BackendName

__all__ = ["Capabilities", "CAPABILITIES", "capabilities_of"]


@dataclass(frozen=True)
class Capabilities:
    """The policies the engine reads off a backend."""

    #: compiling does not disturb what ``run`` measures (a GPU timed while the host's CPUs
    #: compile): the engine times the candidates already built while others still compile
    compile_overlaps_measure: bool = False
    #: ``run`` stops early only once the confidence interval of its median lies wholly above
    #: ``abort_above_us``: the engine then passes the best median so far times (1 + tie
    #: band), "clearly slower than the best"; otherwise it passes the best times
    #: ``EngineConfig.abort_slower_than`` and the backend compares its running median
    ci_early_stop: bool = False
    #: ``run`` stores joules per launch (``BenchResult.energy_j``): the ``energy`` objective
    #: is refused for backends without an energy counter
    measures_energy: bool = False


#: every backend the registry names, and what it can do
CAPABILITIES: dict[str, Capabilities] = {
    "cpu": Capabilities(ci_early_stop=True),
    # nvcc on the host CPUs while the GPU times; NVML's total-energy counter around the batches
    "cuda": Capabilities(compile_overlaps_measure=True, measures_energy=True),
}

assert set(CAPABILITIES) == set(get_args(BackendName)), "BackendName and CAPABILITIES disagree"


def capabilities_of(backend: str) -> Capabilities:
    """The capabilities of the backend named ``backend``; InvalidRequestError when unknown."""
    found = CAPABILITIES.get(backend)
    if found is None:
        raise InvalidRequestError(
            "device.backend", f"unknown backend {backend!r}; one of {sorted(CAPABILITIES)}"
        )
    return found
