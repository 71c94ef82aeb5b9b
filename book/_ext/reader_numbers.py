"""The numbers a reader plans by (book/_data/numbers.yml), as the phrases both the reproduce page
and the bundle's README print: one source, so the two cannot disagree.

The reproduce page gets them as MyST substitutions (``{{ download }}``, set by book_site.py); the
bundle's README (tools/make_bundle.py) formats them in; tests/test_bundle.py checks both.
Standard library and PyYAML only (make_bundle loads this file by path).
"""

from __future__ import annotations

from pathlib import Path

NUMBERS = Path(__file__).resolve().parents[1] / "_data" / "numbers.yml"


def load(path: Path = NUMBERS) -> dict:
    import yaml
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _minutes(value: float) -> str:
    return "about a minute" if round(value) <= 1 else f"about {round(value)} minutes"


def phrases(numbers: dict | None = None) -> dict[str, str]:
    """``{"python": "Python ≥ 3.11", "download": "about 0.5 GB (1.8 GB on disk once installed)", …}``."""
    n = numbers or load()
    return {
        "python": f"Python ≥ {n['python']}",
        "download": f"about {n['download_gb']:.1f} GB ({n['disk_gb']:.1f} GB on disk once installed)",
        "measure_time": _minutes(n["measure_minutes"]),
        "experiments_time": f"{_minutes(n['experiments_minutes'])} on two cores of a shared machine",
        "notebook_time": f"about {n['notebook_seconds']} seconds",
    }
