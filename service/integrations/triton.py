"""``tunehub.autotune``: ``triton.autotune`` backed by the shared tunehub service.

    from service.integrations.triton import autotune

    @autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=w) for w in (2, 4, 8)],
              key=["n_cols"])
    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr): ...

    softmax_kernel[grid](out, x, n_cols)

For each new key (the ``key`` arguments' values, the tensor dtypes and the list of configs) it
first asks tunehub for the best config of (kernel hash, key, device, Triton version). On a miss
it benchmarks every config locally (Triton's ``do_bench`` on a GPU; a wall clock under
``TRITON_INTERPRET=1``), uploads every timing and the winner (``POST /v1/client-results``, a
``submit`` token), and runs the winner: the next process, on this machine or another with the
same GPU, skips tuning. Answers go through the client's on-disk cache, so a machine keeps its
configs while the service is down. Without a server it tunes locally like ``triton.autotune``.

The server and token come from the arguments or ``TUNEHUB_SERVER`` / ``TUNEHUB_TOKEN``; the
cache dir from the argument, ``TUNEHUB_CLIENT_CACHE`` or the user cache dir.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from service.client import ApiError, ClientError, TunehubClient
from service.integrations._client_env import env_client
from service.integrations._triton_env import (
    Timer,
    config_name,
    config_params,
    configs_fingerprint,
    cpu_wall_clock_bench,
    device_of,
    host,
    kernel_hash,
    kernel_name,
    key_value,
    nvml_reading,
    toolchain_of,
    triton_do_bench,
)
from service.schemas.client_results import ClientMeasurementIn, ClientResultsIn
from service.schemas.common import DeviceReport

__all__ = ["autotune", "TunehubAutotuner", "TuneEvent"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TuneEvent:
    """How the config of one key was found: ``source`` is "service" (a shared answer),
    "stale-cache" (the service was down; the client cache answered), "tuned" (benchmarked
    here) or "single" (one config, nothing to choose)."""

    key: dict[str, Any]
    config: str
    source: str
    benchmarked: int
    seconds: float
    uploaded: bool = False


class TunehubAutotuner:
    """The object ``@autotune`` returns: launch it as ``kernel[grid](*args)``."""

    def __init__(
        self,
        fn: Any,
        configs: Sequence[Any],
        key: Sequence[str],
        *,
        client: TunehubClient | None,
        reset_to_zero: Sequence[str] = (),
        restore_value: Sequence[str] = (),
        pre_hook: Callable[..., Any] | None = None,
        post_hook: Callable[..., Any] | None = None,
        timer: Timer | None = None,
    ) -> None:
        if not configs:
            raise ValueError("autotune needs at least one config")
        self.fn = fn
        self.configs = list(configs)
        self.keys = list(key)
        self.arg_names: list[str] = list(fn.arg_names)
        self.client = client
        self.reset_to_zero = list(reset_to_zero)
        self.restore_value = list(restore_value)
        self.pre_hook = pre_hook
        self.post_hook = post_hook
        self.timer = timer
        self.op = f"triton:{kernel_hash(fn)}"
        self._fingerprint = configs_fingerprint(self.configs)
        self._chosen: dict[str, Any] = {}
        self.events: list[TuneEvent] = []
        self.best_config: Any = None

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    # -- the key and the lookup -----------------------------------------------------------

    def tuning_key(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        named = {**dict(zip(self.arg_names, args, strict=False)), **kwargs}
        key = {name: key_value(named[name]) for name in self.keys if name in named}
        for name, value in named.items():
            if name in self.arg_names and hasattr(value, "dtype"):
                key[f"{name}.dtype"] = str(value.dtype)
        key["configs"] = self._fingerprint
        return key

    def _find(self, params: dict[str, Any]) -> Any | None:
        return next((c for c in self.configs if config_params(c) == params), None)

    def _ask_service(self, key: dict[str, Any], device: DeviceReport, compiler: str) -> Any:
        if self.client is None:
            return None, ""
        device_key = f"{device.backend}:{device.name}:{device.arch}:{device.sm_count}"
        try:
            answer = self.client.client_best(self.op, key, device_key, toolchain=compiler)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("tunehub lookup failed: %s", exc)
            return None, ""
        except ClientError as exc:
            log.warning("tunehub unreachable, tuning locally: %s", exc)
            return None, ""
        config = self._find(answer.value.params)
        if config is None:
            log.warning("tunehub's config %s is not among this kernel's configs", answer.value)
            return None, ""
        return config, "stale-cache" if answer.stale else "service"

    # -- benchmarking and upload ----------------------------------------------------------

    def _bench(
        self, args: Sequence[Any], kwargs: dict[str, Any], grid: Any, timer: Timer
    ) -> list[ClientMeasurementIn]:
        named = {**dict(zip(self.arg_names, args, strict=False)), **kwargs}
        saved = {name: named[name].clone() for name in self.restore_value if name in named}
        results = []
        for config in self.configs:
            launch = {**kwargs, **config.all_kwargs()}

            def call(config: Any = config, launch: dict[str, Any] = launch) -> None:
                for name in self.reset_to_zero:
                    named[name].zero_()
                hook_args = {**named, **config.all_kwargs()}
                if getattr(config, "pre_hook", None):
                    config.pre_hook(hook_args)
                if self.pre_hook is not None:
                    self.pre_hook(hook_args)
                self.fn.run(*args, grid=grid, warmup=False, **launch)
                if self.post_hook is not None:
                    self.post_hook(hook_args, exception=None)

            try:
                median, p20, p80 = timer(call)
                ok = all(math.isfinite(t) and t > 0 for t in (median, p20, p80))
                item = ClientMeasurementIn(
                    config_name=config_name(config),
                    params=config_params(config),
                    outcome="ok" if ok else "runtime_error",
                    median_us=median * 1e3 if ok else None,
                    p20_us=p20 * 1e3 if ok else None,
                    p80_us=p80 * 1e3 if ok else None,
                )
            except Exception as exc:  # out of resources, a compile error: that config's outcome
                log.warning("config %s failed: %s", config_name(config), exc)
                item = ClientMeasurementIn(
                    config_name=config_name(config),
                    params=config_params(config),
                    outcome="runtime_error",
                    log=f"{type(exc).__name__}: {exc}"[-4000:],
                )
            results.append(item)
        for name, value in saved.items():
            named[name].copy_(value)
        return results

    def _upload(
        self,
        key: dict[str, Any],
        device: DeviceReport,
        measured: list[ClientMeasurementIn],
        provenance: dict[str, Any],
    ) -> bool:
        if self.client is None:
            return False
        body = ClientResultsIn(
            op=self.op,
            kernel_name=kernel_name(self.fn),
            key=key,
            device=device,
            toolchain=toolchain_of(self.fn),
            measurements=measured,
            provenance=provenance,
        )
        try:
            self.client.upload_client_results(body)
            return True
        except ClientError as exc:
            log.warning("tuned locally, but could not share the result: %s", exc)
            return False

    # -- the launch -----------------------------------------------------------------------

    def choose(self, args: Sequence[Any], kwargs: dict[str, Any], grid: Any) -> Any:
        """The config for these arguments: remembered, from tunehub, or tuned here."""
        key = self.tuning_key(args, kwargs)
        text = repr(sorted(key.items()))
        if text in self._chosen:
            return self._chosen[text]
        start = time.perf_counter()
        measured: list[ClientMeasurementIn] = []
        uploaded = False
        if len(self.configs) == 1:
            config, source = self.configs[0], "single"
        else:
            device = device_of([*args, *kwargs.values()])
            config, source = self._ask_service(key, device, toolchain_of(self.fn).compiler)
            if config is None:
                timer = self.timer or (
                    triton_do_bench() if device.backend == "cuda" else cpu_wall_clock_bench()
                )
                before = nvml_reading(device)
                measured = self._bench(args, kwargs, grid, timer)
                timed = [(m.median_us, i) for i, m in enumerate(measured) if m.median_us]
                if not timed:
                    raise RuntimeError(f"every config of {kernel_name(self.fn)} failed")
                config, source = self.configs[min(timed)[1]], "tuned"
                provenance = {
                    "timer": getattr(timer, "__qualname__", str(timer)).split(".<locals>")[0],
                    "host": host(),
                    "nvml_before": before,
                    "nvml_after": nvml_reading(device),
                    "tune_seconds": round(time.perf_counter() - start, 4),
                }
                uploaded = self._upload(key, device, measured, provenance)
        seconds = time.perf_counter() - start
        self.events.append(
            TuneEvent(key, config_name(config), source, len(measured), seconds, uploaded)
        )
        log.info("%s %s: %s (%s, %.3f s)", kernel_name(self.fn), key, config_name(config),
                 source, seconds)  # fmt: skip
        self._chosen[text] = config
        return config

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        config = self.choose(args, kwargs, grid)
        self.best_config = config
        if getattr(config, "pre_hook", None):
            named = {**dict(zip(self.arg_names, args, strict=False)), **kwargs}
            config.pre_hook({**named, **config.all_kwargs()})
        return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config.all_kwargs())


def _default_client(
    server: str | None, token: str | None, cache_dir: str | os.PathLike[str] | None
) -> TunehubClient | None:
    client = env_client(server, token, cache_dir)
    if client is None:
        log.info("no tunehub server (TUNEHUB_SERVER): tuning locally, nothing shared")
    return client


def autotune(
    configs: Sequence[Any],
    key: Sequence[str],
    *,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    warmup: int | None = None,
    rep: int | None = None,
    do_bench: Timer | None = None,
    server: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    client: TunehubClient | None = None,
) -> Callable[[Any], TunehubAutotuner]:
    """``triton.autotune``'s arguments (``configs``, ``key``, ``reset_to_zero``,
    ``restore_value``, ``pre_hook``, ``post_hook``, ``warmup``, ``rep``, ``do_bench``: a
    callable timing a zero-argument call and returning (median, p20, p80) in ms), plus where
    tunehub is: ``server``, ``token``, ``cache_dir``, or a ready ``client``."""
    timer = do_bench
    if timer is None and (warmup is not None or rep is not None):
        timer = triton_do_bench(warmup or 25, rep or 100)

    def decorator(fn: Any) -> TunehubAutotuner:
        return TunehubAutotuner(
            fn,
            configs,
            key,
            client=client if client is not None else _default_client(server, token, cache_dir),
            reset_to_zero=reset_to_zero or (),
            restore_value=restore_value or (),
            pre_hook=pre_hook,
            post_hook=post_hook,
            timer=timer,
        )

    return decorator
