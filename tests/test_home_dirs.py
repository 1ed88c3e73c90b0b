"""The suite writes only under its temp dirs (issue 24: it created ~/.cache/tunehub)."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from service.settings import Settings


def test_default_dirs_are_under_the_sessions_temp_dir(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = tmp_path_factory.getbasetemp().resolve()
    defaults = Settings()
    for path in (
        defaults.cache_dir,
        defaults.data_dir,
        Path(platformdirs.user_cache_dir("tunehub")),  # what a subprocess without TUNEHUB_*
        Path(platformdirs.user_data_dir("tunehub")),  # variables falls back to
    ):
        assert path.resolve().is_relative_to(base), path
