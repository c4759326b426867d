"""Every test keeps its caches to itself: `plan --against` writes base summaries (automation/planning/base_cache.py).
And no test finds the real engine implicitly (automation/local/toolchain.py `activate`): a test that means it
(the contract test, tests/realengine/) names it itself."""

import pytest


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _no_implicit_toolchain(monkeypatch):
    monkeypatch.setenv("MODELPLANE_NO_TOOLCHAIN", "1")
