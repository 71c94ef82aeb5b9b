"""Shared fixtures: a seeded generator per test, float64 helpers, hypothesis settings, no network.

torch is imported lazily (inside the helpers): the pytest controller process of ``make test``
loads this file too, and importing torch there would add seconds before the workers start.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
TESTENV = ROOT / "tools" / "testenv"
if str(TESTENV) not in sys.path:
    sys.path.insert(0, str(TESTENV))

import netguard  # noqa: E402  (tools/testenv/netguard.py)

# Property tests: enough examples to find shape bugs, few enough to keep `make test` fast;
# derandomized, so a run is reproducible (the examples are derived from each test, not drawn anew).
settings.register_profile("book", max_examples=40, deadline=None, derandomize=True)
settings.load_profile("book")

#: Parity tolerance in float64: a few hundred ulps of the values involved.
PARITY_ATOL = 1e-12


@pytest.fixture(scope="session")
def session_default_dtype():
    """torch's default dtype when the session started (torch is imported here, in the workers)."""
    import torch

    return torch.get_default_dtype()


@pytest.fixture(autouse=True)
def default_dtype_restored(session_default_dtype):
    """After every test torch's default dtype is the session's again: a test or a module fixture
    that runs a notebook's set-up cell (``torch.set_default_dtype(torch.float64)``) must not change
    the tests that an xdist worker runs after it. (Restoring "what the test found" was not enough:
    a module-scoped fixture runs before the first test's function fixtures, and its float64 was
    then kept.)"""
    import torch

    yield
    torch.set_default_dtype(session_default_dtype)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test runs offline: connections and name lookups that would leave the machine raise
    ``netguard.NetworkBlocked`` before any packet is sent (loopback and Unix sockets work)."""
    for owner, name, guard in netguard.PATCHES:
        monkeypatch.setattr(owner, name, guard)
    yield


@pytest.fixture
def gen(request):
    """A ``torch.Generator`` seeded from ATTNREF_SEED and the test's name."""
    from attnref.book import seeding

    return seeding.generator(request.node.name)


def randn(gen, *shape: int, dtype=None):
    import torch

    return torch.randn(*shape, generator=gen, dtype=torch.float64 if dtype is None else dtype)


# ------------------------------------------------------------------------------------------
# Accuracy summary: tests report their worst relative error with
# ``record_property("worst_relative_error", (value, description))``; the worst of each
# function is printed at the end of the run (also under xdist: user properties travel with
# the reports to the controller).
# ------------------------------------------------------------------------------------------

_worst: dict[str, tuple[float, str]] = {}


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == "worst_relative_error":
            function, error, where = value
            if hasattr(report, "wasxfail"):
                function += " [known loss, xfail]"
            if function not in _worst or error > _worst[function][0]:
                _worst[function] = (float(error), str(where))


def pytest_terminal_summary(terminalreporter):
    if not _worst:
        return
    terminalreporter.section("accuracy against a 50-digit mpmath oracle (float64)")
    for function, (error, where) in sorted(_worst.items()):
        terminalreporter.write_line(f"{function}: worst relative error {error:.2e} ({where})")
