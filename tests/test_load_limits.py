"""Time limits that hold on a loaded machine (tools/testenv/slowdown.py, the nbval kernel start).

Under load ≈ 18 on 2 cores, nbval's fixed kernel start-up limits (60 s to start, 10 s for the
kernel's first answer, 30 one-second tries to see its IOPub channel) were missed and every cell of
a notebook errored at set-up. The limits are now the idle budget times the load per core, read
when a kernel starts; these tests check the scaling with a fake kernel client that answers late.
"""

from __future__ import annotations

from queue import Empty

import pytest

import slowdown  # tools/testenv (on sys.path through tests/conftest.py)


def test_the_factor_is_the_load_per_core_and_never_below_one(monkeypatch):
    monkeypatch.delenv("ATTNREF_SLOWDOWN", raising=False)
    monkeypatch.setattr(slowdown.os, "getloadavg", lambda: (18.0, 10.0, 5.0))
    monkeypatch.setattr(slowdown.os, "cpu_count", lambda: 2)
    assert slowdown.factor() == 9.0 and slowdown.limit(10) == 90.0
    monkeypatch.setattr(slowdown.os, "getloadavg", lambda: (0.3, 0.3, 0.3))
    assert slowdown.factor() == 1.0 and slowdown.limit(60) == 60.0
    monkeypatch.setenv("ATTNREF_SLOWDOWN", "4")
    assert slowdown.limit(60) == 240.0
    monkeypatch.setenv("ATTNREF_SLOWDOWN", "0.5")
    with pytest.raises(ValueError, match="ATTNREF_SLOWDOWN"):
        slowdown.factor()


class _LateKernel:
    """A kernel client whose IOPub channel comes up only after ``late`` kernel_info requests, and
    whose shell answers take ``answer`` seconds."""

    def __init__(self, late: int, answer: float):
        self.late, self.answer, self.asked = late, answer, 0

    def kernel_info(self):
        self.asked += 1
        return self.asked


def _running_kernel(monkeypatch, late: int, answer: float):
    nbplugin = pytest.importorskip("nbplugin")
    from nbval import kernel as nbval_kernel

    started = {}

    def start_new_kernel(startup_timeout=60, kernel_name="python", **kwargs):
        started["timeout"] = startup_timeout
        return object(), _LateKernel(late, answer)

    monkeypatch.setattr(nbval_kernel, "start_new_kernel", start_new_kernel)

    def await_reply(self, msg_id, timeout=None):
        if self.kc.answer > timeout:
            raise Empty

    def await_idle(self, msg_id, timeout):
        if msg_id < self.kc.late:
            raise Empty

    monkeypatch.setattr(nbval_kernel.RunningKernel, "await_reply", await_reply)
    monkeypatch.setattr(nbval_kernel.RunningKernel, "await_idle", await_idle)
    nbplugin._patient_kernel_start(nbval_kernel.RunningKernel)
    return nbval_kernel.RunningKernel, started


def test_a_kernel_start_waits_in_proportion_to_the_load(monkeypatch):
    # at load factor 9: 540 s to start, 90 s for the first answer, 270 tries for IOPub
    monkeypatch.setenv("ATTNREF_SLOWDOWN", "9")
    RunningKernel, started = _running_kernel(monkeypatch, late=100, answer=40.0)
    kernel = RunningKernel("python3", startup_timeout=60)
    assert started["timeout"] == 540.0 and kernel.kc.asked == 100
    # the same kernel on an "idle" machine's limits: nbval's own failures
    monkeypatch.setenv("ATTNREF_SLOWDOWN", "1")
    with pytest.raises(RuntimeError, match="timed out after 10 seconds"):
        RunningKernel("python3", startup_timeout=60)
    RunningKernel, _ = _running_kernel(monkeypatch, late=100, answer=1.0)
    with pytest.raises(RuntimeError, match="IOPub after 30 seconds"):
        RunningKernel("python3", startup_timeout=60)
