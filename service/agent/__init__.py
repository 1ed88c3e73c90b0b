"""The worker agent: leases tasks over HTTP, runs the engine, uploads what it measured.

The only place that joins ``tuner`` and the service; it reaches the service through
``service.client`` alone (a GPU host needs a URL and a token, never database credentials)."""

from service.agent.agent import WorkerAgent

__all__ = ["WorkerAgent"]
