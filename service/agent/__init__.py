"""The worker agent: leases tasks over HTTP, runs the engine, uploads what it measured.

The only part of the service that runs the engine (builds, benchmarks, backends); the rest
imports only ``tuner``'s values and rules (problems, the winner rule, variant acceptance,
capabilities). It reaches the service through ``service.client`` alone (a GPU host needs a
URL and a token, never database credentials)."""

from service.agent.agent import WorkerAgent

__all__ = ["WorkerAgent"]
