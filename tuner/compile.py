"""Content-addressed compile cache and parallel builders (one variant or a batch per compile).

Key: the variant id, which already hashes the rendered source, every flag (the target arch
among them) and the compiler's identity. Layout: ``<root>/<key[:2]>/<key>/`` holding the
artifact, ``source`` and ``log``; a failed compile holds ``failed`` instead of the artifact, so a
known-broken variant is not compiled again. Timeouts and killed compilers are not cached: they say
nothing about the source (a worker stopped mid-build, the OOM killer) and may pass next time.

``build_batched`` compiles many variants in one compiler invocation (one shared object with
a symbol per variant) and still gives every variant its own entry, keyed by its own id: the
entry's artifact is a hard link to the batch's shared object. A batch that fails to compile
is compiled again one variant at a time, so an error is recorded against the variant that
has it and its batch mates still build.

Concurrent workers are safe: each compile writes into a private temporary folder under the
root and renames it into place; whoever renames second discards its copy. Eviction removes
least recently used entries (by the mtime ``lookup`` refreshes) beyond ``max_bytes``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tuner.spawn import run_tool
from tuner.types import CompileResult, Variant

__all__ = [
    "CompileCache",
    "CachedBuild",
    "build_variants",
    "build_batched",
    "ArgvFactory",
    "BatchSource",
]

log = logging.getLogger(__name__)

#: how a compiler reports that it, or a process it ran, was killed by a signal: nvcc's own
#: messages and gcc's (a negative return code is the compiler itself killed)
_KILLED = re.compile(
    r"^(nvcc: (Terminated|Killed)|nvcc error\s*: '.*' died due to signal"
    r"|\S+: fatal error: Killed signal)",
    re.MULTILINE,
)


def _killed(returncode: int, output: str) -> bool:
    """True when a failed compile was killed rather than refused: never cached."""
    return returncode < 0 or _KILLED.search(output) is not None


#: (source path, output path, flags) -> argv of the compiler (never run through a shell)
ArgvFactory = Callable[[Path, Path, Sequence[str]], list[str]]
#: variants -> the source of one translation unit holding them all
BatchSource = Callable[[Sequence[Variant]], str]


@dataclass(frozen=True)
class CachedBuild:
    ok: bool
    artifact: Path | None
    log: str


class CompileCache:
    def __init__(
        self, root: str | os.PathLike[str], max_bytes: int = 2 << 30, artifact_name: str = "kernel"
    ) -> None:
        # absolute: compilers run inside a staging folder, where a relative root means nothing
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.artifact_name = artifact_name

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def lookup(self, key: str) -> CachedBuild | None:
        entry = self.entry(key)
        if not entry.is_dir():
            return None
        now = time.time()
        os.utime(entry, (now, now))  # LRU clock
        log_text = _read(entry / "log")
        artifact = entry / self.artifact_name
        if artifact.exists():
            return CachedBuild(True, artifact, log_text)
        if (entry / "failed").exists():
            return CachedBuild(False, None, log_text)
        return None

    def staging_dir(self) -> Path:
        staging = self.root / "tmp"
        staging.mkdir(exist_ok=True)
        return Path(tempfile.mkdtemp(dir=staging))

    def publish(self, key: str, staged: Path) -> Path:
        """Move a staged folder into place; a concurrent writer's copy wins if it was first."""
        entry = self.entry(key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staged, entry)
        except OSError:  # already published by someone else
            shutil.rmtree(staged, ignore_errors=True)
        return entry

    def size_bytes(self) -> int:
        return sum(_share(f) for f in self.root.rglob("*") if f.is_file())

    def evict(self) -> int:
        """Drop least recently used entries until the cache fits; returns entries removed."""
        entries = [p for p in self.root.glob("??/*") if p.is_dir()]
        sizes = {p: sum(_share(f) for f in p.rglob("*") if f.is_file()) for p in entries}
        total = sum(sizes.values())
        removed = 0
        for entry in sorted(entries, key=lambda p: p.stat().st_mtime):
            if total <= self.max_bytes:
                break
            shutil.rmtree(entry, ignore_errors=True)
            total -= sizes[entry]
            removed += 1
        return removed


def _share(path: Path) -> int:
    """A file's size split over its hard links (a batch's object is linked by every entry)."""
    st = path.stat()
    return st.st_size // max(1, st.st_nlink)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _compile_one(
    cache: CompileCache,
    variant: Variant,
    make_argv: ArgvFactory,
    source_name: str,
    timeout_s: float,
    env: dict[str, str] | None,
) -> CompileResult:
    started = time.monotonic()
    staged = cache.staging_dir()
    source = staged / source_name
    source.write_text(variant.source)
    artifact = staged / cache.artifact_name
    argv = make_argv(source, artifact, variant.flags)
    try:
        proc = run_tool(argv, timeout=timeout_s, cwd=staged, env=env)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staged, ignore_errors=True)
        return CompileResult(
            variant.id,
            False,
            None,
            time.monotonic() - started,
            False,
            f"compile timed out after {timeout_s:.0f} s",
            timed_out=True,
        )
    except OSError as exc:  # compiler missing: an infrastructure failure, reported per variant
        shutil.rmtree(staged, ignore_errors=True)
        return CompileResult(variant.id, False, None, time.monotonic() - started, False, str(exc))
    text = f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}"
    (staged / "log").write_text(text)
    ok = proc.returncode == 0 and artifact.exists()
    if not ok and _killed(proc.returncode, text):
        shutil.rmtree(staged, ignore_errors=True)
        return CompileResult(variant.id, False, None, time.monotonic() - started, False, text)
    if not ok:
        artifact.unlink(missing_ok=True)
        (staged / "failed").write_text(str(proc.returncode))
    entry = cache.publish(variant.id, staged)
    final = cache.lookup(variant.id)
    seconds = time.monotonic() - started
    if final is None:  # should not happen; treat as failure rather than crash
        return CompileResult(variant.id, False, None, seconds, False, text)
    log.debug("compiled %s in %.1fs -> %s", variant.name, seconds, entry)
    return CompileResult(
        variant.id,
        final.ok,
        str(final.artifact) if final.artifact else None,
        seconds,
        False,
        final.log,
    )


def _split_cached(
    cache: CompileCache, variants: Sequence[Variant]
) -> tuple[dict[str, CompileResult], dict[str, Variant]]:
    """The cached variants' results, and the variants still to compile (once per id)."""
    results: dict[str, CompileResult] = {}
    todo: dict[str, Variant] = {}
    for variant in variants:
        hit = cache.lookup(variant.id)
        if hit is not None:
            results[variant.id] = CompileResult(
                variant.id, hit.ok, str(hit.artifact) if hit.artifact else None, 0.0, True, hit.log
            )
        else:
            todo.setdefault(variant.id, variant)
    return results, todo


def build_variants(
    cache: CompileCache,
    variants: Sequence[Variant],
    make_argv: ArgvFactory,
    *,
    source_name: str,
    workers: int,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> dict[str, CompileResult]:
    """Compile what the cache lacks, ``workers`` compilers at a time."""
    results, todo = _split_cached(cache, variants)
    if todo:
        # threads suffice: each one waits on a compiler process, which does the work
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [
                pool.submit(_compile_one, cache, v, make_argv, source_name, timeout_s, env)
                for v in todo.values()
            ]
            for future in futures:
                result = future.result()
                results[result.variant_id] = result
        cache.evict()
    return results


def _compile_batch(
    cache: CompileCache,
    batch: Sequence[Variant],
    make_argv: ArgvFactory,
    make_source: BatchSource,
    source_name: str,
    timeout_s: float,
) -> dict[str, CompileResult] | None:
    """Compile ``batch`` as one unit and publish an entry per variant; None when it failed
    (or timed out) and has more than one variant, so the caller compiles them one by one."""
    started = time.monotonic()
    staged = cache.staging_dir()
    source = staged / source_name
    source.write_text(make_source(batch))
    artifact = staged / cache.artifact_name
    argv = make_argv(source, artifact, batch[0].flags)
    limit = timeout_s * len(batch)
    try:
        proc = run_tool(argv, timeout=limit, cwd=staged)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staged, ignore_errors=True)
        if len(batch) > 1:
            return None
        seconds = time.monotonic() - started
        message = f"compile timed out after {limit:.0f} s"
        return {batch[0].id: CompileResult(batch[0].id, False, None, seconds, False, message, True)}
    except OSError as exc:  # compiler missing: an infrastructure failure, reported per variant
        shutil.rmtree(staged, ignore_errors=True)
        seconds = time.monotonic() - started
        return {v.id: CompileResult(v.id, False, None, seconds, False, str(exc)) for v in batch}
    ok = proc.returncode == 0 and artifact.exists()
    text = f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}"
    if not ok and _killed(proc.returncode, text):
        shutil.rmtree(staged, ignore_errors=True)
        seconds = time.monotonic() - started
        return {v.id: CompileResult(v.id, False, None, seconds, False, text) for v in batch}
    if not ok and len(batch) > 1:
        shutil.rmtree(staged, ignore_errors=True)
        return None
    seconds = (time.monotonic() - started) / len(batch)  # the batch's time, shared out
    results: dict[str, CompileResult] = {}
    for variant in batch:
        entry = cache.staging_dir()
        (entry / "source").write_text(variant.source)
        (entry / "log").write_text(text)
        if ok:
            os.link(artifact, entry / cache.artifact_name)
        else:
            (entry / "failed").write_text(str(proc.returncode))
        cache.publish(variant.id, entry)
        final = cache.lookup(variant.id)
        if final is None:  # should not happen; treat as failure rather than crash
            results[variant.id] = CompileResult(variant.id, False, None, seconds, False, text)
            continue
        path = str(final.artifact) if final.artifact else None
        results[variant.id] = CompileResult(variant.id, final.ok, path, seconds, False, final.log)
    shutil.rmtree(staged, ignore_errors=True)
    log.debug("compiled a batch of %d in %.1fs", len(batch), seconds * len(batch))
    return results


def build_batched(
    cache: CompileCache,
    variants: Sequence[Variant],
    make_argv: ArgvFactory,
    make_source: BatchSource,
    *,
    source_name: str,
    workers: int,
    timeout_s: float,
    max_batch: int = 32,
) -> dict[str, CompileResult]:
    """Compile what the cache lacks in at least ``workers`` batches (one compiler each, run
    in parallel) of at most ``max_batch`` variants sharing their flags. ``timeout_s`` is per
    variant: a batch may take that times its size."""
    results, todo = _split_cached(cache, variants)
    if not todo:
        return results
    by_flags: dict[tuple[str, ...], list[Variant]] = {}
    for variant in todo.values():
        by_flags.setdefault(variant.flags, []).append(variant)
    batches: list[list[Variant]] = []
    for group in by_flags.values():
        count = max(min(workers, len(group)), -(-len(group) // max_batch))
        batches += [group[i::count] for i in range(count)]  # round robin: even batches

    def compile_all(units: list[list[Variant]]) -> list[Variant]:
        """Compile each unit; return the variants of units that must be split."""
        split: list[Variant] = []
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [
                (
                    unit,
                    pool.submit(
                        _compile_batch, cache, unit, make_argv, make_source, source_name, timeout_s
                    ),
                )
                for unit in units
            ]
            for unit, future in futures:
                done = future.result()
                if done is None:
                    split += unit
                else:
                    results.update(done)
        return split

    failed = compile_all(batches)
    if failed:
        log.info("%d variants in failed batches: compiling them one by one", len(failed))
        compile_all([[v] for v in failed])
    cache.evict()
    return results
