"""Peak memory of one call, from torch's own allocation events (deterministic, no timing).

``tracemalloc`` does not see torch's allocations (they bypass Python's allocator), and a process's
resident size moves with the C library's caching. torch's profiler, with ``profile_memory=True``,
records every allocation and free of torch's CPU allocator as an event with its size; their running
sum, in time order, is what torch holds beyond what it held before the call, and its maximum is the
call's peak. For given shapes, dtypes and thread count the same blocks are allocated in the same
order, so the number is the same on every run — a check can hold it exactly.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator


@contextlib.contextmanager
def _quiet_profiler() -> Iterator[None]:
    """The profiler's C++ side writes start/stop lines to file descriptor 2; send them to
    /dev/null for the duration (a notebook would otherwise show them as output)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):          # no real descriptor 2: nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_bytes(call: Callable[[], object], *, warm_up: bool = True) -> int:
    """The peak, over one ``call()``, of the bytes torch's CPU allocator holds beyond what it held
    before (the running sum of the allocation (+) and free (−) events torch's profiler records).
    ``warm_up``: run ``call`` once before, so that lazy one-time set-up is not counted."""
    from torch.profiler import ProfilerActivity, profile

    if warm_up:
        call()
    with _quiet_profiler(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted((event.start_ns(), event.nbytes()) for event in prof.profiler.kineto_results.events()
                    if event.name() == "[memory]")
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def operator_flops(call: Callable[[], object], operator: str = "aten::bmm") -> int:
    """The floating-point operations torch's profiler counts for ``operator`` during one ``call()``
    (2 per multiply–add of a matrix product): how much of a product was actually computed."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_profiler(), profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        call()
    return int(sum(event.flops for event in prof.events() if event.name == operator))
