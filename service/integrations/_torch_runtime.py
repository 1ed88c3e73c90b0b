"""The process-wide state of the PyTorch ops: configuration, the client, one resolved kernel
per (op, epilogue, layout, dtype, dims, device), the shapes seen and the active recorders.

The first call of a shape resolves it (:meth:`Runtime.entry`, under a lock): ask the
client's on-disk answer cache, then the service; check the distance bound; load the winner's
library by the load policy (:mod:`._torch_winner`); ask ``tunehub_can_run``. The result, a
kernel or a fallback, is kept in ``Runtime.kernels``; every later call of that shape costs a
dict lookup and the ctypes call (or torch's op). A fallback is logged once per shape and
counted per call. The configuration is :mod:`._torch_config`'s, the shape keys'
problems :mod:`._torch_problems`' (both re-exported here).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import torch
from pydantic import ValidationError

from service.client import ApiError, ClientError, ConnectionFailed, RetryPolicy, ServiceDown
from service.integrations._client_env import env_client
from service.integrations._torch_config import (
    LOAD_POLICIES,
    ArtifactClient,
    TorchConfig,
    config_from_env,
)
from service.integrations._torch_device import backend_of_key, device_key
from service.integrations._torch_loader import KernelLibrary, int64_array, reason_text
from service.integrations._torch_problems import (
    DTYPE_NAMES,
    DTYPES,
    NO_EPILOGUE,
    SCALED_OUT_CODES,
    SCALING_CODES,
    problem_of,
)
from service.integrations._torch_record import ShapeRecorder
from service.integrations._torch_stats import (
    RECORDED_REASONS,
    Fallback,
    OpCounts,
    ShapeStat,
    TorchStats,
)
from service.integrations._torch_winner import NoLibrary, load_winner
from service.schemas.configs import BestConfigOut, ConfigQuery

__all__ = [
    "LOAD_POLICIES",
    "TorchConfig",
    "ArtifactClient",
    "Entry",
    "Runtime",
    "RUNTIME",
    "DTYPES",
    "DTYPE_NAMES",
    "NO_EPILOGUE",
    "SCALED_OUT_CODES",
    "SCALING_CODES",
    "problem_of",
]

log = logging.getLogger(__name__)


class Entry:
    """The resolved kernel of one shape: a loaded library with its ABI dims ready, or a
    fallback (``library`` None)."""

    __slots__ = ("library", "dims", "n_dims", "workspace", "stat", "cuda", "refused")

    def __init__(self, stat: ShapeStat, library: KernelLibrary | None, dims: Sequence[int]):
        self.stat = stat
        self.library = library
        self.dims = int64_array(dims)
        self.n_dims = len(dims)
        self.workspace = library.workspace_bytes(dims) if library is not None else 0
        self.cuda = stat.device.startswith("cuda:")
        #: tunehub_can_run codes already said for per-call dims
        self.refused: set[int] = set()

    def launch(
        self,
        inputs: Sequence[torch.Tensor],
        output: torch.Tensor,
        dims: Sequence[int] | None = None,
    ) -> bool:
        """Run the kernel on torch's current stream; False (after saying why, once) when it
        returned an error, and the shape falls back from then on. ``dims``: this call's ABI
        dims where they change per call within one shape key (grouped_mm's tokens per
        expert): asked of ``tunehub_can_run`` each call, a refusal falls back for that call."""
        library = self.library
        if library is None:
            return False
        if self.cuda and output.device.index != torch.cuda.current_device():
            with torch.cuda.device(output.device):  # kernels launch on the current device
                return self.launch(inputs, output, dims)
        array, n_dims, workspace_bytes = self.dims, self.n_dims, self.workspace
        if dims is not None:
            code = library.can_run(dims)
            if code != 0:
                if code not in self.refused:
                    self.refused.add(code)
                    log.warning("tunehub %s %s: tunehub_can_run refused dims %s (%s); this "
                                "call runs torch's op", self.stat.op, self.stat.problem,
                                list(dims), reason_text(code))  # fmt: skip
                return False
            array, n_dims = int64_array(dims), len(dims)
            workspace_bytes = library.workspace_bytes(dims)
        pointers = (ctypes.c_void_p * len(inputs))(*[t.data_ptr() for t in inputs])
        workspace = None
        if workspace_bytes:
            buffer = torch.empty(workspace_bytes, dtype=torch.uint8, device=output.device)
            workspace = buffer.data_ptr()
        stream = torch.cuda.current_stream(output.device).cuda_stream if self.cuda else None
        code = library.run(
            pointers, output.data_ptr(), array, n_dims, workspace, workspace_bytes, stream
        )
        if code == 0:
            self.stat.tunehub_calls += 1
            return True
        self.library = None
        RUNTIME.fell_back(self.stat, Fallback("run_failed", f"tunehub_run: {reason_text(code)}"))
        return False


class _Resolved(Exception):
    """Internal: resolution ended in a fallback."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.fallback = Fallback(reason, message)


class Runtime:
    def __init__(self) -> None:
        self.kernels: dict[tuple[Any, ...], Entry] = {}
        self.shapes: list[ShapeStat] = []
        self.unsupported: dict[tuple[Any, ...], ShapeStat] = {}
        self.recorders: list[ShapeRecorder] = []
        self._lock = threading.RLock()
        self._config: TorchConfig | None = None
        self._client: ArtifactClient | None = None
        self._client_made = False
        #: after a failed connection only the on-disk cache is asked for a while
        self._down = ServiceDown()
        #: the recorder of TUNEHUB_RECORD, read with the rest of the environment
        self._env_recorder: ShapeRecorder | None = None

    # -- configuration ----------------------------------------------------------------------

    @property
    def config(self) -> TorchConfig:
        if self._config is None:
            self._config = config_from_env()
            self._record_from_env()
        return self._config

    def _record_from_env(self) -> None:
        if self._env_recorder is not None:
            self.recorders.remove(self._env_recorder)
            self._env_recorder = None
        if path := os.environ.get("TUNEHUB_RECORD"):
            self._env_recorder = ShapeRecorder(path)
            self.recorders.append(self._env_recorder)

    def configure(self, client: ArtifactClient | None = None, **changes: Any) -> TorchConfig:
        """Change the configuration (None values keep theirs) and forget resolved shapes and
        counts. The client is made again from the new settings when ``server``, ``token`` or
        ``cache_dir`` change; a given ``client`` is used as it is."""
        with self._lock:
            old = self.config
            config = replace(old, **{k: v for k, v in changes.items() if v is not None})
            if config.load not in LOAD_POLICIES:
                raise ValueError(f"load must be one of {LOAD_POLICIES}, not {config.load!r}")
            self._config = config
            if client is not None:
                self._client, self._client_made = client, True
            elif (config.server, config.token, config.cache_dir) != (
                old.server, old.token, old.cache_dir
            ):  # fmt: skip
                self._client, self._client_made = None, False
            self.reset()
            return config

    @property
    def client(self) -> ArtifactClient | None:
        if not self._client_made:
            config = self.config
            retry = RetryPolicy(attempts=2, backoff_s=0.1)
            made = env_client(config.server, config.token, config.cache_dir, retry=retry)
            self._client = made  # type: ignore[assignment]
            self._client_made = True
        return self._client

    def reset(self, configuration: bool = False) -> None:
        """Forget every resolved shape and the counts (loaded libraries stay loaded); with
        ``configuration``, also what ``configure`` set (the environment is read again)."""
        with self._lock:
            if configuration:
                self._config = None
                self._client = None
                self._client_made = False
            self.kernels.clear()
            self.shapes.clear()
            self.unsupported.clear()
            self._down.clear()

    # -- the slow path: resolve a shape once ------------------------------------------------

    def entry(
        self,
        op: str,
        layout: str,
        dtype: torch.dtype,
        dims: Sequence[int],
        device: torch.device,
        epilogue: str = NO_EPILOGUE,
        run_dims: Sequence[int] | None = None,
    ) -> Entry:
        """The resolved kernel of (op, epilogue, layout, dtype, dims, device), resolving it on
        its first call; ``Runtime.kernels`` holds it under that key. ``run_dims``: the ABI
        dims of this call where the key's ``dims`` are not all of them (grouped_mm: the
        bucket; the call adds the tokens per expert); ``tunehub_can_run`` is asked with them."""
        key = (op, epilogue, layout, dtype, tuple(dims), device)
        abi = list(run_dims if run_dims is not None else dims)
        with self._lock:
            found = self.kernels.get(key)
            if found is not None:
                return found
            start = time.perf_counter()
            try:
                name = device_key(device)
            except (ValueError, RuntimeError) as exc:
                name = f"{device.type}:?"
                stat = self._stat(op, layout, dtype, dims, name, epilogue)
                entry = Entry(stat, None, abi)
                self.fell_back(stat, Fallback("unsupported", str(exc)))
            else:
                stat = self._stat(op, layout, dtype, dims, name, epilogue)
                try:
                    library = self._resolve(stat, abi)
                    entry = Entry(stat, library, abi)
                except _Resolved as resolved:
                    entry = Entry(stat, None, abi)
                    self.fell_back(stat, resolved.fallback)
            stat.resolve_seconds = time.perf_counter() - start
            self.kernels[key] = entry
            self.shapes.append(stat)
            return entry

    @staticmethod
    def _stat(
        op: str, layout: str, dtype: torch.dtype, dims: Sequence[int], device: str, epilogue: str
    ) -> ShapeStat:
        problem = problem_of(op, dims, epilogue)
        return ShapeStat(op, DTYPE_NAMES[dtype], layout, problem, device, source="")

    def fell_back(self, stat: ShapeStat, fallback: Fallback) -> None:
        """Say once (a warning) that this shape runs torch's op, and record it."""
        self.config  # noqa: B018  (reads the environment, TUNEHUB_RECORD included, once)
        stat.fallback = fallback
        stat.source = str(fallback)
        dims = ",".join(f"{k}={v}" for k, v in stat.problem.items())
        log.warning(
            "tunehub %s %s %s on %s runs torch's op: %s",
            stat.op, stat.dtype, dims, stat.device, fallback.message,
        )  # fmt: skip
        if fallback.reason in RECORDED_REASONS:
            for recorder in self.recorders:
                recorder.add(stat.record())

    def _lookup(self, query: ConfigQuery) -> tuple[BestConfigOut, str]:
        """(answer, where from): the on-disk cache first (unless revalidating), then the
        service; _Resolved when neither answers."""
        client = self.client
        if client is None:
            raise _Resolved(
                "no_server", "no tunehub server configured (configure(server=...) or "
                "TUNEHUB_SERVER)"
            )  # fmt: skip
        cached = client.best_from_cache(query)
        service_down = self._down.active
        if cached is not None and (not self.config.revalidate or service_down):
            return cached.value, "on-disk cache"
        if service_down:
            raise _Resolved("unreachable", "the service is unreachable and nothing is cached")
        try:
            answer = client.best(query)
        except ApiError as exc:
            if exc.status == 404:
                raise _Resolved("not_tuned", "not tuned yet for this device") from None
            raise _Resolved("service_error", f"the service refused: {exc.detail}") from None
        except ConnectionFailed as exc:
            self._down.mark()
            raise _Resolved("unreachable", f"{exc}; nothing cached") from None
        except ClientError as exc:
            raise _Resolved("service_error", str(exc)) from None
        return answer.value, "on-disk cache" if answer.stale else "service"

    def _resolve(self, stat: ShapeStat, dims: list[int]) -> KernelLibrary:
        try:
            query = ConfigQuery(
                op=stat.op,  # type: ignore[arg-type]  # validated here: ops newer than schemas
                dtype=stat.dtype,  # type: ignore[arg-type]
                layout=stat.layout,
                problem=stat.problem,
                device=stat.device,
            )
        except ValidationError as exc:
            message = exc.errors()[0]["msg"]
            raise _Resolved("service_error", f"this tunehub cannot ask for it: {message}") from None
        answer, answered_from = self._lookup(query)
        stat.variant = answer.variant_name
        stat.exact = answer.exact
        stat.distance = answer.distance
        if not answer.exact and answer.distance > self.config.max_distance:
            tuned = ",".join(f"{k}={v}" for k, v in answer.tuned_problem.items())
            raise _Resolved(
                "too_far",
                f"the nearest tuned shape ({tuned}) is at log2 distance {answer.distance:.2f}, "
                f"beyond {self.config.max_distance:g}",
            )
        client = self.client
        assert client is not None  # an answer came from it
        try:
            library, loaded_from = load_winner(
                answer, backend_of_key(stat.device), self.config, client
            )
        except NoLibrary as exc:
            raise _Resolved("no_library", str(exc)) from None
        code = library.can_run(dims)
        if code != 0:
            raise _Resolved(
                "refused", f"{answer.variant_name}'s tunehub_can_run refused: {reason_text(code)}"
            )
        local = answered_from == "on-disk cache" and loaded_from.endswith("cache")
        stat.source = "on-disk cache" if local else loaded_from.removesuffix(" cache")
        return library

    # -- what the ops report ----------------------------------------------------------------

    def note_unsupported(self, op: str, tensor: torch.Tensor, layout: str, message: str) -> None:
        """A call the ops hand to torch before asking anyone (a dtype, dim or argument
        tunehub has no kernel for): said once per (op, shape, why), counted per call."""
        key = (op, tensor.dtype, tuple(tensor.shape), tensor.device, message)
        stat = self.unsupported.get(key)
        if stat is None:
            with self._lock:
                stat = ShapeStat(
                    op, str(tensor.dtype).removeprefix("torch."), layout,
                    {"shape": list(tensor.shape)}, tensor.device.type, source="",
                )  # fmt: skip
                self.fell_back(stat, Fallback("unsupported", message))
                self.unsupported[key] = stat
                self.shapes.append(stat)
        stat.fallback_calls += 1

    def stats(self) -> TorchStats:
        ops: dict[str, OpCounts] = {}
        shapes = list(self.shapes)
        for shape in shapes:
            counts = ops.setdefault(shape.op, OpCounts())
            counts.tunehub += shape.tunehub_calls
            counts.fallback += shape.fallback_calls
            if shape.fallback is not None and shape.fallback_calls:
                counts.reasons[shape.fallback.reason] += shape.fallback_calls
        return TorchStats(ops, [replace(s) for s in shapes])

    def start_recording(self, recorder: ShapeRecorder) -> None:
        with self._lock:
            self.recorders.append(recorder)
            for stat in self._untuned(self.shapes):
                recorder.add(stat.record())

    def stop_recording(self, recorder: ShapeRecorder) -> None:
        with self._lock:
            self.recorders.remove(recorder)

    @staticmethod
    def _untuned(shapes: Iterable[ShapeStat]) -> list[ShapeStat]:
        return [s for s in shapes if s.fallback and s.fallback.reason in RECORDED_REASONS]


RUNTIME = Runtime()
