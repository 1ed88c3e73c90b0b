"""The web UI (server-rendered pages under ``/ui``); see :mod:`service.api.ui.routes`."""

from service.api.ui.routes import root_router, router, static_files

__all__ = ["router", "root_router", "static_files"]
