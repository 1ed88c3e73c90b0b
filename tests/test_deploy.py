"""The deployment files (issue 24): docker-compose.yml, the Dockerfile, the env examples and the
entry scripts in deploy/.

No container engine runs on the CI machine, so compose is checked here, not run: the file is
validated against the compose specification's JSON schema (the copy check-jsonschema vendors),
and the rules a team relies on are asserted on its content. tests/test_deploy_rehearsal.py runs
what the containers run, outside docker.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

from tests.deploy_files import (
    COMPOSE,
    DEPLOY,
    REPO_ROOT,
    SERVER_SERVICES,
    WORKER_SERVICES,
    compose,
    dockerfile_args,
    dockerfile_stages,
    env_file_names,
    schema_errors,
)

# -- the compose specification ------------------------------------------------------------


def test_compose_file_is_valid_under_the_compose_specification() -> None:
    assert schema_errors(compose()) == []


def test_the_schema_check_rejects_what_compose_would_reject() -> None:
    """The validation can fail: a misspelt key and a list for a string are errors."""
    misspelt = copy.deepcopy(compose())
    misspelt["services"]["api"]["healtcheck"] = misspelt["services"]["api"].pop("healthcheck")
    assert any("healtcheck" in error for error in schema_errors(misspelt))
    wrong_type = copy.deepcopy(compose())
    wrong_type["services"]["worker"]["restart"] = ["unless-stopped"]
    assert any("restart" in error for error in schema_errors(wrong_type))


# -- profiles: a server host and GPU hosts ------------------------------------------------


def test_profiles_split_the_server_host_from_the_gpu_hosts() -> None:
    services = compose()["services"]
    assert set(services) == SERVER_SERVICES | WORKER_SERVICES
    for name in SERVER_SERVICES:
        assert services[name]["profiles"] == ["server"], name
    for name in WORKER_SERVICES:
        assert services[name]["profiles"] == ["worker"], name


def test_the_worker_starts_nothing_of_the_server() -> None:
    worker = compose()["services"]["worker"]
    assert "depends_on" not in worker and "links" not in worker
    assert not re.search(r"\b(api|db)\b", json.dumps(worker.get("environment", {})))
    assert "ports" not in worker  # it only calls out


def test_the_api_waits_for_a_healthy_database() -> None:
    assert compose()["services"]["api"]["depends_on"]["db"]["condition"] == "service_healthy"


def test_no_interpolation_fails_other_commands() -> None:
    """`${VAR:?msg}` (and `${VAR?msg}`) is checked by every compose command, for every service
    and profile: the first steps would fail until a token exists."""
    text = COMPOSE.read_text(encoding="utf-8")
    assert re.findall(r"\$\{[^}]*\?[^}]*\}", text) == []


def test_services_have_health_checks_and_restart_policies() -> None:
    services = compose()["services"]
    for name, service in services.items():
        assert service["restart"] == "unless-stopped", name
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert services["api"]["healthcheck"]["test"] == [
        "CMD",
        "python",
        "/app/deploy/healthcheck.py",
    ]


def test_the_worker_reserves_the_gpus_and_shares_the_host_identity() -> None:
    worker = compose()["services"]["worker"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert "/etc/machine-id:/etc/machine-id:ro" in worker["volumes"]


# -- images: built once -------------------------------------------------------------------


def test_no_container_installs_at_start() -> None:
    """Nothing runs pip or apt when a container starts: the images have it all."""
    for name, service in compose()["services"].items():
        for key in ("command", "entrypoint"):
            assert not re.search(r"\b(pip|apt-get|apt)\b", json.dumps(service.get(key, ""))), name
    for script in ("serve.sh", "worker.sh"):
        assert not re.search(r"\b(pip|apt-get|apt)\b", (DEPLOY / script).read_text()), script


def test_services_build_the_dockerfile_targets() -> None:
    stages = dockerfile_stages()
    services = compose()["services"]
    assert services["api"]["build"]["target"] == "server"
    assert services["worker"]["build"]["target"] == "worker"
    assert {"server", "worker"} <= set(stages)


def test_the_server_image_is_slim_python_non_root_and_migrates_before_serving() -> None:
    args = dockerfile_args()
    server = dockerfile_stages()["server"]
    assert args["PYTHON_IMAGE"] == "python:3.12-slim" and server[0] == "FROM ${PYTHON_IMAGE}"
    installs = [i for i in server if i.startswith("RUN") and "pip install -e" in i]
    assert len(installs) == 1 and "pip install -e /app " in installs[0]
    user = [i for i in server if i.startswith("USER")]
    assert user == ["USER tunehub"] and server.index(user[0]) > server.index(installs[-1])
    assert server[-1] == 'ENTRYPOINT ["/app/deploy/serve.sh"]'
    serve = (DEPLOY / "serve.sh").read_text()
    assert serve.index("tunehub db upgrade") < serve.index("exec tunehub serve --no-local-worker")


def test_the_worker_image_is_cuda_devel_with_the_extras_and_non_root() -> None:
    args = dockerfile_args()
    worker = dockerfile_stages()["worker"]
    assert re.fullmatch(r"nvidia/cuda:13\.0\.\d+-devel-ubuntu24\.04", args["CUDA_IMAGE"])
    assert worker[0] == "FROM ${CUDA_IMAGE}"
    extras = [i for i in worker if i.startswith("RUN") and '"/app[cuda,vendor]"' in i]
    assert len(extras) == 1 and "pip install -e" in extras[0]
    assert any("${TORCH_SPEC}" in i for i in worker if i.startswith("RUN"))
    user = [i for i in worker if i.startswith("USER")]
    assert user == ["USER tunehub"] and worker.index(user[0]) > worker.index(extras[0])
    assert 'ENTRYPOINT ["/app/deploy/worker.sh"]' in worker
    assert 'CMD ["--backend", "cuda"]' in worker


def test_the_images_install_the_dependencies_before_the_source() -> None:
    """A rebuild after a source change keeps the dependency layer (torch, the extras)."""
    for stage, extras in (("server", ""), ("worker", " cuda vendor")):
        instructions = dockerfile_stages()[stage]
        (deps,) = [i for i in instructions if f"python requirements.py{extras} >" in i]
        assert "pip install -r" in deps
        assert instructions.index(deps) < instructions.index("COPY . /app"), stage


def test_requirements_lists_the_dependencies_and_the_named_extras() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    listed = subprocess.run(
        [sys.executable, str(DEPLOY / "requirements.py"), "cuda", "vendor"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert listed == project["dependencies"] + extras["cuda"] + extras["vendor"]
    unknown = subprocess.run(
        [sys.executable, str(DEPLOY / "requirements.py"), "cudaa"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert unknown.returncode != 0 and "no such extra: cudaa" in unknown.stderr


def test_the_images_leave_out_secrets_and_history() -> None:
    ignored = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    for pattern in (".git", ".venv", "deploy/*.env"):
        assert pattern in ignored
    # the package's readme is needed to install it
    assert "README.md" not in ignored and "*.md" not in ignored


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore's matching, for its simple patterns: a name, a glob, ``**/`` any depth."""
    parts = path.split("/")
    for pattern in patterns:
        anywhere = pattern.startswith("**/")
        glob = pattern.removeprefix("**/")
        starts = range(len(parts)) if anywhere else range(1)
        for start in starts:
            for end in range(start + 1, len(parts) + 1):
                if fnmatch.fnmatchcase("/".join(parts[start:end]), glob):
                    return True
    return False


def test_the_build_context_holds_what_the_images_run() -> None:
    patterns = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    sent = {path for path in tracked if not _ignored(path, patterns)}
    needed = ["README.md", "pyproject.toml", "alembic.ini", "migrations/env.py"]
    needed += [f"deploy/{name}" for name in ("serve.sh", "worker.sh", "healthcheck.py")]
    needed += ["deploy/requirements.py", "service/cli/main.py", "tuner/render.py"]
    assert [path for path in needed if path not in sent] == []
    assert any(path.startswith("kernel_templates/cuda/") for path in sent)
    assert any(path.startswith("migrations/versions/") for path in sent)
    assert not any(path.startswith(("tests/", ".git/")) for path in sent)
    assert _ignored("deploy/server.env", patterns)
    assert _ignored("service/__pycache__/x.pyc", patterns)


def test_entry_scripts_are_executable() -> None:
    for script in ("serve.sh", "worker.sh"):
        assert os.access(DEPLOY / script, os.X_OK), script


# -- env files ----------------------------------------------------------------------------


def _variables_the_scripts_require(script: str) -> set[str]:
    return set(re.findall(r"\$\{([A-Z][A-Z0-9_]*):-\}", (DEPLOY / script).read_text()))


def test_env_examples_name_every_variable_compose_and_the_scripts_use() -> None:
    server = env_file_names(DEPLOY / "server.env.example")
    worker = env_file_names(DEPLOY / "worker.env.example")
    text = COMPOSE.read_text(encoding="utf-8")
    interpolated = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))
    assert interpolated <= server | worker
    # what the containers are told to read (the comments name the worker's)
    named = set(re.findall(r"\b(TUNEHUB_[A-Z0-9_]+|POSTGRES_[A-Z_]+)\b", text))
    assert named - {"POSTGRES_USER", "POSTGRES_DB"} <= server | worker
    assert {"POSTGRES_PASSWORD", "TUNEHUB_DATABASE_URL"} <= server
    assert _variables_the_scripts_require("serve.sh") <= server
    assert _variables_the_scripts_require("worker.sh") == {"TUNEHUB_SERVER", "TUNEHUB_TOKEN"}
    assert {"TUNEHUB_SERVER", "TUNEHUB_TOKEN", "TUNEHUB_WORKER_NAME"} <= worker


def test_env_examples_name_only_documented_variables() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for example in ("server.env.example", "worker.env.example"):
        for name in env_file_names(DEPLOY / example):
            assert name.startswith("POSTGRES_") or f"`{name}`" in readme, (example, name)


@pytest.mark.parametrize("example", ["server.env.example", "worker.env.example"])
def test_services_read_the_env_file_of_their_example(example: str) -> None:
    """The env files are optional to compose (a worker command never needs the server's)."""
    path = f"deploy/{example.removesuffix('.example')}"
    services = compose()["services"]
    readers = {n for n, s in services.items() if {"path": path, "required": False} in s["env_file"]}
    assert readers == (SERVER_SERVICES if example.startswith("server") else WORKER_SERVICES)
    assert path in (REPO_ROOT / ".gitignore").read_text().replace("/deploy", "deploy")


# -- the docs say the same ----------------------------------------------------------------


def test_documented_compose_commands_name_a_profile_and_existing_services() -> None:
    services = set(compose()["services"])
    for doc in ("docs/deploy.md", "README.md", "docker-compose.yml"):
        text = (REPO_ROOT / doc).read_text(encoding="utf-8")
        commands = re.findall(r"docker compose [^`\n]*", text)
        assert commands or doc == "README.md", doc
        for command in commands:
            profile = re.search(r"--profile (\w+)", command)
            assert profile and profile.group(1) in {"server", "worker"}, (doc, command)
            named = re.search(r"\b(?:exec|logs -f|logs)\s+(\S+)", command)
            assert named is None or named.group(1) in services, (doc, command)


def test_the_deploy_doc_says_compose_is_validated_but_not_run() -> None:
    text = (REPO_ROOT / "docs/deploy.md").read_text(encoding="utf-8")
    assert "compose specification" in text and "no container engine" in text.lower()
    assert "tests/test_deploy.py" in text and "tests/test_deploy_rehearsal.py" in text
