"""Hypothesis profiles: bounded in CI (CI=true), thorough on demand (HYPOTHESIS_PROFILE=thorough),
and short in the quick loop (``pytest -m "not slow"``, tests/README.md)."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=150, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.register_profile(
    "thorough", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# The quick loop's: the tests that set no example count of their own draw fewer examples there
# (the full run keeps the profile above; failures found before are replayed from the database).
settings.register_profile("quick", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config: pytest.Config) -> None:
    """``-m "not slow"`` is the quick loop: the short profile, unless one is named."""
    if "not slow" in (config.getoption("markexpr") or "") and "HYPOTHESIS_PROFILE" not in os.environ:
        settings.load_profile("quick")
