"""Shared test settings."""
import pytest


@pytest.fixture(autouse=True)
def _quiet_compile_notice(monkeypatch):
    """The compile notice depends on the state of the numba cache (others may have just edited a
    kernel), not on the code under test: off by default, on in the tests of the notice itself."""
    monkeypatch.setenv("FASTSIM_COMPILE_NOTICE", "0")
