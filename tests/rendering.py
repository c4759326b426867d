"""Helpers for composition tests: render a small fleet, find objects in it."""

from __future__ import annotations

from components.args import control_plane_cluster
from fleet.scheduler import schedule
from tests.manifests import run
from workloads.render import render


def rendered(*objects):
    loaded = run(*objects)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    plan = schedule(loaded.fleet)
    return plan, render(loaded.fleet, plan, control_plane_cluster(loaded.fleet, None))


def find(result, kind: str, stack: str | None = None, target: str | None = None) -> list[dict]:
    return [obj for s, t, obj in result.objects()
            if obj["kind"] == kind and (stack is None or s == stack) and (target is None or t == target)]


def one(result, kind: str, **where) -> dict:
    found = find(result, kind, **where)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]
