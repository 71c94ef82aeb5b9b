"""tools/bench.py: the per-file times and the breakdown of `make test` read from pytest's JUnit XML."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_bench():
    spec = importlib.util.spec_from_file_location("attnclaims_bench", ROOT / "tools" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase file="notebooks/01-a.ipynb" name="Cell 0" time="3.0"/>
  <testcase file="notebooks/01-a.ipynb" name="Cell 1" time="1.5"/>
  <testcase file="notebooks/01-a.ipynb" name="seeds[1]" time="2.0"/>
  <testcase file="tests/test_browser.py" name="test_every_page_was_opened" time="20.0"/>
  <testcase file="tests/test_browser.py" name="test_search_finds_a_word" time="0.5"/>
  <testcase file="tests/test_minilm.py" name="test_hidden_states_match_transformers[float32]" time="4.0"/>
  <testcase file="tests/test_helpers.py" name="test_x" time="0.25"/>
</testsuite></testsuites>
"""


def test_unit_seconds_and_breakdown(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert bench.unit_seconds(junit) == {"tests/test_browser.py": 20.5, "notebooks/01-a.ipynb": 6.5,
                                         "tests/test_minilm.py": 4.0, "tests/test_helpers.py": 0.25}
    breakdown = bench.test_breakdown(junit)
    assert list(breakdown) == list(bench.CATEGORIES)
    assert breakdown == {"notebooks, stored seed (strict nbval)": 4.5, "notebooks, other seed (assertions)": 2.0,
                         "browser test (book build + Chromium)": 20.5, "real-model oracle (transformers)": 4.0,
                         "other tests": 0.2}
    assert abs(sum(breakdown.values()) - sum(bench.unit_seconds(junit).values())) < 0.1   # each rounded to 0.1 s


def test_missing_or_broken_junit_gives_nothing(tmp_path: Path) -> None:
    assert bench.unit_seconds(tmp_path / "absent.xml") == {} and bench.test_breakdown(tmp_path / "absent.xml") == {}
    broken = tmp_path / "broken.xml"
    broken.write_text("<testsuites><testcase")
    assert bench.unit_seconds(broken) == {} and bench.test_breakdown(broken) == {}


def test_the_kernel_paths_of_each_strict_pass_are_read_from_the_log() -> None:
    log = ("... 1200 passed in 200s\nCPU kernel paths exercised: AVX512 (9 notebooks; MKL_ENABLE_INSTRUCTIONS=unrestricted)\n"
           "... 270 passed in 60s\nCPU kernel paths exercised: DEFAULT (9 notebooks; MKL_ENABLE_INSTRUCTIONS=SSE4_2)\n")
    assert bench.kernel_paths_of(log) == ["AVX512 (9 notebooks; MKL_ENABLE_INSTRUCTIONS=unrestricted)",
                                          "DEFAULT (9 notebooks; MKL_ENABLE_INSTRUCTIONS=SSE4_2)"]
    assert bench.kernel_paths_of("no such line") == []
