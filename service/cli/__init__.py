"""The ``tunehub`` command line (typer + rich): serve, tune, best, query, worker, db, token.

``main`` is the console script's entry point; ``python -m service.cli`` runs the same."""

from service.cli.main import app, main

__all__ = ["app", "main"]
