"""Where the refreshed catalog lives: ``<gpulease home>/catalog/offers.csv``."""

from __future__ import annotations

from pathlib import Path

from gpulease.config import home


def cache_dir() -> Path:
    """``<gpulease home>/catalog``."""
    return home() / "catalog"


def cache_path() -> Path:
    """The refreshed offers file (it wins over the bundled snapshot when present)."""
    return cache_dir() / "offers.csv"
