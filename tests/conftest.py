"""Every test keeps its caches to itself: `plan --against` writes base summaries (automation/planning/base_cache.py)."""

import pytest


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
