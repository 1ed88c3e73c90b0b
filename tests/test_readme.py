"""The README says what a new user needs (issue 24): every setting, how the tests reach
PostgreSQL, the Triton extra and imports, cache and extra sizes, how to stop the server."""

from __future__ import annotations

import re
from pathlib import Path

from service.settings import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_every_setting_is_in_the_configuration_table() -> None:
    table = _section("Configuration")
    missing = [
        f"TUNEHUB_{name.upper()}"
        for name in Settings.model_fields
        if f"`TUNEHUB_{name.upper()}`" not in table
    ]
    assert missing == []


def test_the_readme_says_how_the_tests_reach_postgresql() -> None:
    assert "TUNEHUB_TEST_PG_URL" in README
    assert "postgresql+psycopg://postgres@127.0.0.1:5432/postgres" in README
    assert "never skipped" in README


def test_the_triton_snippet_names_its_extra_and_imports() -> None:
    triton = _section("Triton autotune drop-in")
    assert "'.[triton]'" in triton
    assert "import triton\n" in triton and "import triton.language as tl\n" in triton


def test_sizes_and_stopping_the_server_are_documented() -> None:
    assert "at most 2 GiB" in README  # the compile cache (tuner.compile.CompileCache)
    assert "about 2 GB" in README  # the vendor extra
    assert "kill %1" in README
    assert "confirmation rounds" in README and "first pass" in README


def test_every_environment_variable_the_code_reads_is_in_the_readme() -> None:
    root = Path(__file__).resolve().parents[1]
    named = {
        match
        for folder in ("service", "tuner")
        for path in (root / folder).rglob("*.py")
        for match in re.findall(r"TUNEHUB_[A-Z][A-Z0-9_]*", path.read_text(encoding="utf-8"))
    }
    assert sorted(name for name in named if f"`{name}`" not in README) == []
