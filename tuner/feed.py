"""Built candidates, handed to the engine's timing loop as they become ready.

    feed = StreamFeed(ask, build, workers, out_of_budget, remaining, lead_first=True)
    # or BatchFeed(ask, build, batch_size, out_of_budget)
    while (item := feed.next()) is not None:
        index, variant, built = item                                    # time it
    feed.close()

``ask(n)`` gives up to n more (strategy index, rendered variant) pairs (none: the search is
over); ``build(variants)`` compiles them (``Backend.build``). Which feed the engine uses
depends on whether compiling disturbs what is measured (``compile_overlaps_measure``):

- :class:`StreamFeed` (a GPU, timed while the host's CPUs compile): each candidate builds on
  its own, ``workers`` at a time, and is handed over as soon as its build finishes, in
  completion order. A slow build (a CUTLASS instance: ~40 s with nvcc) holds one compiler
  while the others are built and timed, so a time budget is spent on what can be measured,
  whichever build happened to be slow. With ``lead_first`` the first candidate asked (the
  vendor default) is handed over before any other, whatever builds faster: it is timed
  first, the baseline every later candidate's early stop is measured against. When the
  budget ends, builds not started are dropped and running ones finish in the background
  into the compile cache, where the next job finds them; the engine reports the candidates
  left unmeasured.
- :class:`BatchFeed` (the CPU, whose compiles would disturb its timing): the strategy is asked
  a batch, the batch is built whole, then its candidates are timed; no compile runs while
  one is timed.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from tuner.types import CompileResult, Variant

__all__ = ["Ask", "Build", "Built", "BatchFeed", "StreamFeed"]

log = logging.getLogger(__name__)

#: up to n more candidates: (strategy index, rendered variant); none when the search is over
Ask = Callable[[int], list[tuple[int, Variant]]]
#: compiles variants: {variant id: CompileResult}
Build = Callable[[Sequence[Variant]], dict[str, CompileResult]]
#: one candidate ready to time
Built = tuple[int, Variant, CompileResult]

#: a StreamFeed waiting for builds looks at the budget (and a cancel) this often, in seconds
POLL_S = 0.25


class BatchFeed:
    """Ask a batch, build it whole, hand over its candidates in order; then the next batch."""

    def __init__(
        self, ask: Ask, build: Build, batch_size: int, out_of_budget: Callable[[], bool]
    ) -> None:
        self.ask, self.build = ask, build
        self.batch_size = max(1, batch_size)
        self.out_of_budget = out_of_budget
        self._queue: deque[Built] = deque()

    def next(self) -> Built | None:
        while not self._queue:
            if self.out_of_budget():
                return None
            batch = self.ask(self.batch_size)
            if not batch:
                return None
            builds = self.build([variant for _, variant in batch])
            self._queue.extend((index, variant, builds[variant.id]) for index, variant in batch)
        return self._queue.popleft()

    def close(self) -> None:
        self._queue.clear()


class StreamFeed:
    """Keep ``workers`` builds of one candidate each in flight; hand over whichever is done."""

    def __init__(
        self,
        ask: Ask,
        build: Build,
        workers: int,
        out_of_budget: Callable[[], bool],
        remaining_s: Callable[[], float],
        *,
        lead_first: bool = False,
    ) -> None:
        self.ask, self.build = ask, build
        #: hand over nothing before the first candidate asked
        self.lead_first = lead_first
        self._lead: Future[CompileResult] | None = None
        self.workers = max(1, workers)
        self.out_of_budget = out_of_budget
        self.remaining_s = remaining_s
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="build")
        self._pending: dict[Future[CompileResult], tuple[int, Variant]] = {}
        self._ready: deque[Built] = deque()
        self._asked_all = False

    def _build_one(self, variant: Variant) -> CompileResult:
        return self.build([variant])[variant.id]

    def _top_up(self) -> None:
        """Start builds until ``workers`` are in flight (the strategy permitting)."""
        while not self._asked_all and len(self._pending) < self.workers:
            if self.out_of_budget():
                return
            batch = self.ask(self.workers - len(self._pending))
            if not batch:
                self._asked_all = True
                return
            for index, variant in batch:
                future = self._pool.submit(self._build_one, variant)
                self._pending[future] = (index, variant)
                if self.lead_first and self._lead is None:
                    self._lead = future

    def next(self) -> Built | None:
        while True:
            self._top_up()
            # builds done before the lead wait in ``_ready`` (their compilers take the next)
            lead_pending = self._lead is not None and self._lead in self._pending
            if self._ready and not lead_pending:
                return self._ready.popleft()
            if not self._pending or self.out_of_budget():
                return None
            timeout = max(0.0, min(POLL_S, self.remaining_s()))
            done, _ = wait(list(self._pending), timeout=timeout, return_when=FIRST_COMPLETED)
            for future in [f for f in self._pending if f in done]:  # in the order asked
                index, variant = self._pending.pop(future)
                item = (index, variant, future.result())
                if future is self._lead:
                    self._ready.appendleft(item)
                else:
                    self._ready.append(item)

    def close(self) -> None:
        """Drop the builds not started; running ones finish into the compile cache."""
        if self._pending:
            log.info(
                "%d builds left when the budget ended; running ones finish into the cache",
                len(self._pending),
            )
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._ready.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
