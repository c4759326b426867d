"""`render --out`: the folder written by forked writers is the folder one process writes, and an object its schema
rejects, found while writing, leaves the folder as it was."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

import workloads.output as output
from benchmarks.plan_bench import generate
from tests.rendering import rendered
from workloads.output import InvalidObjects, write
from workloads.schemas import check


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def fleet_render():
    return rendered(*generate(30, 6))[1]


def test_forked_writers_write_the_same_files_as_one_process(tmp_path, monkeypatch, fleet_render):
    monkeypatch.setattr(output, "PARALLEL_FROM", 10)
    monkeypatch.setattr(output, "CHUNK", 7)
    seen: list[int] = []
    one = write(fleet_render, tmp_path / "one", jobs=1, check=check)
    several = write(fleet_render, tmp_path / "several", jobs=3, check=check, on_objects=seen.append)
    assert one == several == sum(1 for _ in fleet_render.objects()) > 10
    assert sum(seen) == several and len(seen) > 1
    assert tree(tmp_path / "one") == tree(tmp_path / "several")


@pytest.mark.parametrize("jobs", [1, 3])
def test_an_invalid_object_found_while_writing_leaves_the_folder_as_it_was(tmp_path, monkeypatch, fleet_render, jobs):
    monkeypatch.setattr(output, "PARALLEL_FROM", 10)
    monkeypatch.setattr(output, "CHUNK", 7)
    out = tmp_path / "out"
    write(fleet_render, out, jobs=jobs, check=check)
    before = tree(out)
    broken = copy.deepcopy(fleet_render)
    objects = [obj for _, _, obj in broken.objects()]
    objects[3]["spec"] = "not an object"
    last = max(i for i, obj in enumerate(objects) if isinstance(obj.get("spec"), dict))
    objects[last]["spec"] = 7
    with pytest.raises(InvalidObjects) as refused:
        write(broken, out, jobs=jobs, check=check)
    assert len(refused.value.problems) >= 2
    first = refused.value.problems[0]
    assert f"{objects[3]['kind']}/{objects[3]['metadata']['name']}" in first  # in render order
    assert f"{objects[last]['kind']}/{objects[last]['metadata']['name']}" in refused.value.problems[-1]
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left behind
