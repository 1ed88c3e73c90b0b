"""Print the requirements in ``pyproject.toml`` of the current directory, with the extras named
as arguments, one a line. The Dockerfile installs them in a layer of their own, before the source
is copied, so that a rebuild after a source change reinstalls nothing but the package:

    python deploy/requirements.py cuda vendor > /tmp/requirements.txt    # from the repo root
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PYPROJECT = Path("pyproject.toml")


def requirements(extras: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise SystemExit(f"no such extra: {', '.join(unknown)} (one of {', '.join(optional)})")
    found = list(project["dependencies"])
    for extra in extras:
        found += optional[extra]
    return found


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))
