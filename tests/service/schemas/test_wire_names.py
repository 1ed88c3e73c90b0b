"""The wire's names (service/schemas/names.py) and the engine's own agree, name for name.

The schemas import nothing of tuner (an import contract), so each side writes its names
down once; this test is what keeps the two lists one list.
"""

from __future__ import annotations

from typing import get_args

from service.schemas import names
from tuner import problems, registry, types


def test_ops_dtypes_layouts_and_dims_agree() -> None:
    assert get_args(names.Op) == get_args(problems.Op) == tuple(problems.PROBLEM_TYPES)
    assert get_args(names.DType) == get_args(problems.DType)
    assert get_args(names.ReduceKind) == get_args(problems.ReduceKind)
    assert names.LAYOUTS == problems.LAYOUTS
    assert names.MAX_DIM == problems.MAX_DIM


def test_backends_strategies_objectives_agree() -> None:
    assert get_args(names.BackendName) == get_args(registry.BackendName)
    assert set(get_args(names.BackendName)) == set(registry.BACKENDS)
    assert get_args(names.StrategyName) == get_args(registry.StrategyName)
    assert get_args(names.Objective) == get_args(types.Objective)


def test_outcomes_and_abi_agree() -> None:
    assert [(o.name, o.value) for o in names.Outcome] == [(o.name, o.value) for o in types.Outcome]
    assert names.ABI_VERSION == types.ABI_VERSION


def test_the_schemas_load_no_tuner_module() -> None:
    import subprocess
    import sys

    code = (
        "import sys, service.schemas, service.client; "
        "print(sorted(m for m in sys.modules if m == 'tuner' or m.startswith('tuner.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
