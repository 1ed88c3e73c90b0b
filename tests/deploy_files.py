"""The deployment files read as data: docker-compose.yml, the Dockerfile's stages and the env
examples in deploy/ (tests/test_deploy.py, tests/test_deploy_rehearsal.py)."""

from __future__ import annotations

import json
import re
import shlex
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
COMPOSE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
DEPLOY = REPO_ROOT / "deploy"
SERVER_SERVICES = {"db", "api"}
WORKER_SERVICES = {"worker"}


@cache
def compose_schema() -> dict[str, Any]:
    """The compose specification's schema, as check-jsonschema vendors it (with its license:
    check_jsonschema/builtin_schemas/vendor/licenses/LICENSE.compose-spec, Apache 2.0)."""
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads(vendor.joinpath("compose-spec.json").read_text())
    return schema


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def schema_errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(compose_schema())
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


def env_file_names(path: Path) -> set[str]:
    """The variables an env file sets, commented-out examples included."""
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=", line.strip())
        if match:
            names.add(match.group(1))
    return names


def dockerfile_stages() -> dict[str, list[str]]:
    """Each stage's instructions (continuation lines joined), by the stage's name."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    stages: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        start = re.match(r"FROM\s+(\S+)\s+AS\s+(\S+)", line, re.IGNORECASE)
        if start:
            current = stages.setdefault(start.group(2), [f"FROM {start.group(1)}"])
        elif current is not None:
            current.append(line)
    return stages


def dockerfile_args() -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+(\w+)=(\S+)", DOCKERFILE.read_text(), re.MULTILINE))


def env_file_values(path: Path) -> dict[str, str]:
    """What an env file sets (commented lines left out), as compose reads simple lines."""
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if match:
            values[match.group(1)] = match.group(2).strip().strip("'\"")
    return values


def image_env(stage: str) -> dict[str, str]:
    """The ``TUNEHUB_*`` variables a Dockerfile stage sets with ENV."""
    values = {}
    for instruction in dockerfile_stages()[stage]:
        if instruction.startswith("ENV "):
            for pair in shlex.split(instruction[4:]):
                name, _, value = pair.partition("=")
                if name.startswith("TUNEHUB_"):
                    values[name] = value
    return values
