"""The web UI (server-rendered pages under ``/ui``); see :mod:`service.api.ui.routes`."""

from service.api.ui.routes import router, static_files

__all__ = ["router", "static_files"]
