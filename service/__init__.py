"""tunehub service: settings, database models, REST API, and (elsewhere) the worker and CLI."""

__all__: list[str] = []
