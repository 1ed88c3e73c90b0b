"""One router per resource."""

__all__: list[str] = []
