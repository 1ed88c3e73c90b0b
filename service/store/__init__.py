"""Persistence: typed models, sessions, keys, tokens, the task queue, results, lookups,
export/import. Imports neither ``service.api``, ``service.cli``, ``service.agent`` nor
``service.client`` (checked by the import contracts in pyproject.toml)."""
