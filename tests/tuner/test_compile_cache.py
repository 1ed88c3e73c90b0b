"""CompileCache and build_variants with real g++: hits, concurrent writers, failures, eviction."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from tuner.compile import CompileCache, build_variants
from tuner.types import CompileResult, Variant

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def tiny_variant(body: str, flags: tuple[str, ...] = ("-O0",)) -> Variant:
    source = f"int main() {{ {body} return 0; }}\n"
    digest = hashlib.sha256((source + "\0".join(flags)).encode()).hexdigest()
    return Variant(
        op="test", name=f"tiny_{digest[:6]}", params={}, source=source, flags=flags, id=digest
    )


def gxx_argv(source: Path, output: Path, flags: Sequence[str]) -> list[str]:
    return ["g++", *flags, str(source), "-o", str(output)]


def build(
    cache: CompileCache, variants: list[Variant], workers: int = 2
) -> dict[str, CompileResult]:
    return build_variants(
        cache, variants, gxx_argv, source_name="k.cpp", workers=workers, timeout_s=60.0
    )


def test_second_build_is_a_cache_hit(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    variant = tiny_variant("int x = 1; (void)x;")
    first = build(cache, [variant])[variant.id]
    assert first.ok and not first.cached and first.artifact and Path(first.artifact).exists()
    second = build(cache, [variant])[variant.id]
    assert second.ok and second.cached
    assert second.artifact == first.artifact
    assert second.seconds == 0.0


def test_failed_compile_is_cached(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    variant = tiny_variant("undeclared_thing();")
    first = build(cache, [variant])[variant.id]
    assert not first.ok and first.artifact is None and "undeclared_thing" in first.log
    second = build(cache, [variant])[variant.id]
    assert not second.ok and second.cached and "undeclared_thing" in second.log


def test_concurrent_writers_leave_one_valid_entry(tmp_path: Path) -> None:
    variant = tiny_variant("volatile int y = 2; (void)y;")
    results: list[CompileResult] = []
    barrier = threading.Barrier(3)

    def writer() -> None:
        barrier.wait()
        results.extend(build(CompileCache(tmp_path), [variant], workers=1).values())

    threads = [threading.Thread(target=writer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 3 and all(r.ok for r in results)
    entries = [p for p in tmp_path.glob("??/*") if p.is_dir()]
    assert len(entries) == 1
    assert {r.artifact for r in results} == {str(entries[0] / "kernel")}
    staging = tmp_path / "tmp"
    assert not staging.exists() or not any(staging.iterdir())  # losers cleaned up
    assert CompileCache(tmp_path).lookup(variant.id) is not None


def test_eviction_drops_least_recently_used(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    old, new = tiny_variant("int a = 3; (void)a;"), tiny_variant("int b = 4; (void)b;")
    build(cache, [old])
    build(cache, [new])
    one_entry = sum(f.stat().st_size for f in cache.entry(new.id).rglob("*") if f.is_file())
    assert cache.lookup(new.id) is not None  # refresh: new is the most recent
    old_entry = cache.entry(old.id)
    os.utime(old_entry, (1, 1))  # make old clearly least recently used
    cache.max_bytes = one_entry + 1
    removed = cache.evict()
    assert removed == 1
    assert cache.lookup(old.id) is None
    assert cache.lookup(new.id) is not None
    assert cache.size_bytes() <= cache.max_bytes


def test_a_relative_root_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # compilers run inside the staging folder: a root given relative to the caller's working
    # directory must still name the source there (a CPU re-tune with --cache-dir .cache/x
    # failed every compile before the root was made absolute)
    monkeypatch.chdir(tmp_path)
    cache = CompileCache("relative/cache")
    variant = tiny_variant("int y = 2; (void)y;")
    result = build(cache, [variant])[variant.id]
    assert result.ok, result.log
    assert result.artifact and Path(result.artifact).is_absolute()


@pytest.mark.parametrize(
    "script",
    [
        "kill -TERM $$",  # the compiler itself killed: a negative return code
        "echo 'nvcc: Terminated' >&2; exit 255",  # nvcc stopped by SIGTERM
        "echo \"nvcc error   : 'cicc' died due to signal 9 (Kill signal)\" >&2; exit 255",
        "echo 'g++: fatal error: Killed signal terminated program cc1plus' >&2; exit 1",
    ],
)
def test_a_killed_compile_is_not_cached(tmp_path: Path, script: str) -> None:
    """A build killed mid-way (a worker stopped, the OOM killer) says nothing about the source:
    the next build compiles again instead of answering 'failed' from the cache."""
    cache = CompileCache(tmp_path)
    variant = tiny_variant("int x = 1; (void)x;")

    def killed_argv(source: Path, output: Path, flags: Sequence[str]) -> list[str]:
        return ["sh", "-c", script]

    first = build_variants(
        cache, [variant], killed_argv, source_name="k.cpp", workers=1, timeout_s=60.0
    )
    assert not first[variant.id].ok and cache.lookup(variant.id) is None
    second = build(cache, [variant])[variant.id]
    assert second.ok and not second.cached
