"""docs/architecture.md names every module of service/ and tuner/ (issue 25: six were left out)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_module_is_named_in_the_architecture_doc() -> None:
    doc = (REPO / "docs/architecture.md").read_text()
    missing = [
        str(path.relative_to(REPO))
        for package in ("service", "tuner")
        for path in sorted((REPO / package).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py") and path.name not in doc
    ]
    assert missing == []
