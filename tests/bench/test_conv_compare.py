"""bench/conv_compare.py's wiring, on stand-ins for torch and the harness (no GPU here): which
request each label sends, which output buffer torch's ``.out`` op writes per launch, and that
a wrong or missing op leaves its columns empty with the reason recorded."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bench.conv_compare import COMPARE_ROUNDS, compare_row
from tuner.reference import Verdict

N_SETS = 3


class FakeTensor:
    def __init__(self, name: str, base: FakeTensor | None = None) -> None:
        self.name = name
        self.base = base or self

    def permute(self, *dims: int) -> FakeTensor:
        return FakeTensor(f"{self.name}.permute", self.base)

    def view(self, dtype: Any) -> FakeTensor:
        return self

    def fill_(self, value: int) -> None:
        self.base.name += ":poisoned"


class FakeWorkloadLib:
    def __init__(self, verify_ok: bool) -> None:
        self.verify_ok = verify_ok
        self.timings = 0

    def time_launches(self, fn: Any, n_sets: int, *, abort_us: Any, **timing: Any) -> Any:
        for i in range(2 * n_sets):  # two rotations of a batch
            fn(i % n_sets, 0)
        self.timings += 1
        return SimpleNamespace(samples_us=[10.0 + self.timings])

    def verify_output(self, work: Any, dtype: str) -> Verdict:
        return Verdict(self.verify_ok, 0.01, "ok" if self.verify_ok else "max |error| 7")


class FakeHarness:
    def __init__(self, verify_ok: bool = True) -> None:
        self.wl = FakeWorkloadLib(verify_ok)
        self.requests: list[dict[str, Any]] = []
        self.workload: Any = None

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(req)
        return {"samples_us": [2.0 if req.get("fixed_output") else 3.0]}

    def workload_for(self, req: dict[str, Any]) -> Any:
        if self.workload is None:
            self.workload = SimpleNamespace(
                inputs=[[FakeTensor(f"x{i}"), FakeTensor(f"w{i}")] for i in range(N_SETS)],
                outputs=[FakeTensor(f"y{i}") for i in range(N_SETS)],
            )
        return self.workload


class FakeTorch:
    """The parts of torch compare_row calls, recording what they were given."""

    uint8 = "uint8"

    def __init__(self, has_out_op: bool = True) -> None:
        self.backends = SimpleNamespace(
            cudnn=SimpleNamespace(benchmark=False, deterministic=False, allow_tf32=False)
        )
        self.conv2d_calls: list[tuple[str, bool]] = []
        self.out_calls: list[tuple[str, str, tuple[Any, ...]]] = []
        self.nn = SimpleNamespace(functional=SimpleNamespace(conv2d=self._conv2d))
        op = SimpleNamespace(out=self._out) if has_out_op else SimpleNamespace()
        self.ops = SimpleNamespace(aten=SimpleNamespace(cudnn_convolution=op))
        self.cuda = SimpleNamespace(synchronize=lambda: None)

    def _conv2d(self, x: FakeTensor, w: FakeTensor, **kw: Any) -> None:
        self.conv2d_calls.append((x.base.name, bool(self.backends.cudnn.benchmark)))

    def _out(self, x: FakeTensor, w: FakeTensor, *args: Any, out: FakeTensor) -> None:
        self.out_calls.append((x.base.name, out.base.name.split(":")[0], args))


def _row() -> dict[str, Any]:
    return {
        "artifact": "/cache/win/kernel.so",
        "vendor_default_artifact": "/cache/default/kernel.so",
        "stride": 2,
        "pad": 0,
        "dilation": 1,
    }


def _req() -> dict[str, Any]:
    return {"cmd": "run", "op": "conv2d", "dtype": "f16", "layout": "nhwc", "problem": {}}


def test_every_label_is_timed_on_its_buffers() -> None:
    torch, harness, row = FakeTorch(), FakeHarness(), _row()
    compare_row(torch, harness, row, _req())
    times = row["times_us"]
    assert set(times) == {
        "tunehub",
        "cudnn_default",
        "tunehub_fixed_out",
        "cudnn_default_fixed_out",
        "torch",
        "torch_out_rotated",
        "torch_out_fixed",
        "torch_benchmark",
    }
    # the harness: each artifact rotated and with one fixed output, once a round
    sent = [(r["artifact"], bool(r.get("fixed_output"))) for r in harness.requests]
    assert sorted(sent) == sorted(
        [
            (art, fixed)
            for art in ("/cache/win/kernel.so", "/cache/default/kernel.so")
            for fixed in (False, True)
        ]
        * COMPARE_ROUNDS
    )
    assert times["tunehub"] == 3.0 and times["tunehub_fixed_out"] == 2.0
    # the .out op: once to verify (into set 0), then per timing window either rotated
    # (set i -> output i) or fixed (set i -> output 0), one window of each a round
    verify, rest = torch.out_calls[0], torch.out_calls[1:]
    assert verify[:2] == ("x0", "y0")
    windows = [rest[i : i + 2 * N_SETS] for i in range(0, len(rest), 2 * N_SETS)]
    rotated = [(f"x{i % N_SETS}", f"y{i % N_SETS}") for i in range(2 * N_SETS)]
    fixed = [(f"x{i % N_SETS}", "y0") for i in range(2 * N_SETS)]
    kinds = [[c[:2] for c in w] for w in windows]
    assert kinds.count(rotated) == kinds.count(fixed) == COMPARE_ROUNDS
    assert len(kinds) == 2 * COMPARE_ROUNDS
    # F.conv2d's own flags, passed explicitly: padding, stride, dilation, groups, benchmark...
    assert rest[0][2] == ([0, 0], [2, 2], [1, 1], 1, False, False, False)
    # torch with benchmark off, and on for the torch_benchmark windows only, off again after
    flags = [bench for _, bench in torch.conv2d_calls]
    per_window = [flags[i : i + 2 * N_SETS] for i in range(0, len(flags), 2 * N_SETS)]
    assert per_window.count([True] * 2 * N_SETS) == COMPARE_ROUNDS
    assert per_window.count([False] * 2 * N_SETS) == COMPARE_ROUNDS
    assert torch.backends.cudnn.benchmark is False
    assert "compare_errors" not in row


def test_a_wrong_out_op_leaves_its_columns_empty() -> None:
    torch, harness, row = FakeTorch(), FakeHarness(verify_ok=False), _row()
    compare_row(torch, harness, row, _req())
    assert "torch_out_rotated" not in row["times_us"]
    assert "torch_out_fixed" not in row["times_us"]
    assert {"torch", "torch_benchmark", "tunehub_fixed_out"} <= set(row["times_us"])
    assert row["compare_errors"]["torch_out"].startswith("wrong result: max |error| 7")
    assert len(torch.out_calls) == 1  # the verifying call only


def test_a_missing_out_op_is_recorded_and_the_rest_goes_on() -> None:
    torch, harness, row = FakeTorch(has_out_op=False), FakeHarness(), _row()
    compare_row(torch, harness, row, _req())
    assert row["compare_errors"]["torch_out"].startswith("AttributeError")
    assert {"torch", "torch_benchmark", "tunehub", "cudnn_default_fixed_out"} <= set(
        row["times_us"]
    )


@pytest.mark.parametrize("missing", ["artifact", "vendor_default_artifact"])
def test_a_row_without_an_artifact_times_the_rest(missing: str) -> None:
    torch, harness, row = FakeTorch(), FakeHarness(), {**_row(), missing: None}
    compare_row(torch, harness, row, _req())
    label = "tunehub" if missing == "artifact" else "cudnn_default"
    assert label not in row["times_us"] and f"{label}_fixed_out" not in row["times_us"]
    assert "torch_out_rotated" in row["times_us"]
