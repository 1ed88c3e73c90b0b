"""The Triton autotune drop-in against a real tunehub server: the first process tunes and
shares, the next one (another cache dir) skips benchmarking, and the cache answers while the
service is down. The logic is tested with clearly named test doubles of the kernel and the
benchmark function (they run without Triton); a real ``@triton.jit`` kernel runs under
Triton's CPU interpreter (``TRITON_INTERPRET=1``) where triton and torch are installed."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from service.cli.serve import create_token_in_db
from service.client import RetryPolicy, TunehubClient
from service.integrations.triton import TunehubAutotuner, autotune
from service.settings import Settings

HAVE_TRITON = all(importlib.util.find_spec(m) is not None for m in ("triton", "torch"))


@pytest.fixture
def sqlite_settings(tmp_path: Path, _sqlite_template: Path) -> Settings:
    path = tmp_path / "tunehub.db"
    shutil.copyfile(_sqlite_template, path)
    return Settings(
        database_url=f"sqlite:///{path}", data_dir=tmp_path / "d", cache_dir=tmp_path / "c"
    )


@dataclass
class FakeConfig:
    """Test double of ``triton.Config``: meta-parameters and launch options."""

    kwargs: dict[str, Any]
    num_warps: int = 4
    num_stages: int = 2
    pre_hook: Any = None

    def all_kwargs(self) -> dict[str, Any]:
        return {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages}


@dataclass
class FakeKernel:
    """Test double of a ``@triton.jit`` function: records each launch's keyword arguments."""

    arg_names: list[str] = field(default_factory=lambda: ["x", "n", "BLOCK"])
    src: str = "def fake_kernel(x, n, BLOCK): pass"
    launches: list[dict[str, Any]] = field(default_factory=list)

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        self.launches.append(kwargs)


class CountingBench:
    """Test double of ``do_bench``: calls the kernel once and returns a fixed time per
    ``num_warps`` (8 warps fastest), counting how often it was asked."""

    def __init__(self, kernel: FakeKernel) -> None:
        self.kernel = kernel
        self.calls = 0

    def __call__(self, call: Callable[[], Any]) -> tuple[float, float, float]:
        self.calls += 1
        call()
        ms = {2: 0.3, 4: 0.2, 8: 0.1}[self.kernel.launches[-1]["num_warps"]]
        return ms, ms * 0.95, ms * 1.05


CONFIGS = [FakeConfig({"BLOCK": 1024}, num_warps=w) for w in (2, 4, 8)]


def fake_process(url: str, token: str, cache: Path) -> tuple[TunehubAutotuner, CountingBench]:
    """One 'process': a fresh kernel, client and decorator (nothing remembered in memory)."""
    kernel = FakeKernel()
    bench = CountingBench(kernel)
    client = TunehubClient(url, token, cache_dir=cache, retry=RetryPolicy(attempts=1))
    tuned = autotune(configs=CONFIGS, key=["n"], do_bench=bench, client=client)(kernel)
    return tuned, bench


def test_first_process_tunes_and_shares_the_next_skips_benchmarking(
    sqlite_settings: Settings, live_service: Callable[[Settings], Any], tmp_path: Path
) -> None:
    service = live_service(sqlite_settings)
    token = create_token_in_db(sqlite_settings.database_url, "build", ["submit"])

    first, first_bench = fake_process(service.url, token, tmp_path / "cache1")
    first[(4,)]("x", 4096)
    assert first_bench.calls == 3
    event = first.events[-1]
    assert (event.source, event.benchmarked, event.uploaded) == ("tuned", 3, True)
    assert first.best_config.num_warps == 8
    assert first.fn.launches[-1]["num_warps"] == 8
    first[(4,)]("x", 4096)  # the same key again: remembered, no lookup, no benchmark
    assert first_bench.calls == 3 and len(first.events) == 1

    second, second_bench = fake_process(service.url, token, tmp_path / "cache2")
    second[(4,)]("x", 4096)
    assert second_bench.calls == 0
    assert second.events[-1].source == "service" and second.best_config.num_warps == 8

    second[(4,)]("x", 8192)  # a new key is tuned again
    assert second_bench.calls == 3 and second.events[-1].source == "tuned"

    service.stop()
    offline, offline_bench = fake_process(service.url, token, tmp_path / "cache2")
    offline[(4,)]("x", 4096)
    assert offline_bench.calls == 0 and offline.events[-1].source == "stale-cache"

    cold, cold_bench = fake_process(service.url, token, tmp_path / "cache3")
    cold[(4,)]("x", 4096)  # down and nothing cached: tune here, share nothing
    assert cold_bench.calls == 3
    assert (cold.events[-1].source, cold.events[-1].uploaded) == ("tuned", False)


def test_a_token_without_submit_scope_still_tunes_but_shares_nothing(
    sqlite_settings: Settings, live_service: Callable[[Settings], Any], tmp_path: Path
) -> None:
    service = live_service(sqlite_settings)
    reader = create_token_in_db(sqlite_settings.database_url, "reader", ["read"])
    tuned, bench = fake_process(service.url, reader, tmp_path / "cache")
    tuned[(1,)]("x", 64)
    assert bench.calls == 3 and tuned.events[-1].uploaded is False
    again, again_bench = fake_process(service.url, reader, tmp_path / "other")
    again[(1,)]("x", 64)
    assert again_bench.calls == 3  # nothing was shared


def test_the_key_holds_the_key_args_and_the_config_list(tmp_path: Path) -> None:
    kernel = FakeKernel()
    tuned = autotune(configs=CONFIGS, key=["n"], client=None)(kernel)
    key = tuned.tuning_key(("x", 4096), {"BLOCK": 3})
    assert key["n"] == 4096 and "configs" in key and "x" not in key
    fewer = autotune(configs=CONFIGS[:2], key=["n"], client=None)(FakeKernel())
    assert fewer.tuning_key(("x", 4096), {})["configs"] != key["configs"]


@pytest.mark.skipif(not HAVE_TRITON, reason="triton and torch are not installed")
def test_a_real_triton_kernel_under_the_cpu_interpreter(
    sqlite_settings: Settings,
    live_service: Callable[[Settings], Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import torch
    import triton
    import triton.language as tl

    service = live_service(sqlite_settings)
    token = create_token_in_db(sqlite_settings.database_url, "build", ["submit"])
    configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in (128, 256, 512)]

    def build(cache: Path) -> TunehubAutotuner:
        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

        client = TunehubClient(service.url, token, cache_dir=cache)
        return autotune(configs=configs, key=["n"], client=client)(scale_kernel)

    x = torch.rand(1000)
    out = torch.empty_like(x)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(1000, meta["BLOCK"]),)

    first = build(tmp_path / "c1")
    first[grid](x, out, 1000)
    assert torch.allclose(out, x * 2.0)
    assert first.events[-1].source == "tuned" and first.events[-1].benchmarked == 3
    assert first.events[-1].uploaded
    out.zero_()
    second = build(tmp_path / "c2")
    second[grid](x, out, 1000)
    assert torch.allclose(out, x * 2.0)
    assert second.events[-1].source == "service" and second.events[-1].benchmarked == 0
    assert second.best_config.kwargs == first.best_config.kwargs
    assert first.op.startswith("triton:") and first.op == second.op
