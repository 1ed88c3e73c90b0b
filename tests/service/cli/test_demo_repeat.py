"""`tunehub demo` twice in the same folder: the second run is the same machine measuring
again, a re-measure, so `best` must not say "confirmed" (issue 22, item 2). Each `serve`
start mints a new local-worker token; the host identity is what decides."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from sqlalchemy import func, select

from service.cli.serve import run_demo
from service.store.db import make_engine, make_sessionmaker
from service.store.models import ApiToken, BestConfig, Worker


def _demo(data_dir: Path) -> str:
    out = io.StringIO()
    code = run_demo(data_dir, Console(file=out, width=120), max_variants=2)
    text = out.getvalue()
    assert code == 0, text
    return text


def test_a_repeated_demo_does_not_confirm_its_own_winner(tmp_path: Path) -> None:
    data_dir = tmp_path / ".tunehub-demo"
    first = _demo(data_dir)
    second = _demo(data_dir)
    for text in (first, second):
        assert "confirmed   no (one host)" in text, text
        assert "confirmed   yes" not in text
    engine = make_engine(f"sqlite:///{data_dir / 'tunehub.db'}")
    try:
        with make_sessionmaker(engine)() as session:
            # two serve starts: two local-worker tokens and workers, one host fingerprint
            tokens = session.scalar(
                select(func.count()).select_from(ApiToken).where(ApiToken.name == "local-worker")
            )
            hosts = set(session.scalars(select(Worker.host_fingerprint)))
            assert tokens == 2 and len(hosts) == 1 and None not in hosts
            assert session.scalar(select(BestConfig.confirmed)) is False
    finally:
        engine.dispose()
