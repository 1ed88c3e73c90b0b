"""The FastAPI application: ``app.create_app``, dependencies, error handlers, one route
module per resource. Imports neither ``service.cli``, ``service.agent`` nor
``service.client``."""
