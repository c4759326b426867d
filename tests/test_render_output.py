"""`render --out`: the folder written by forked writers is the folder one process writes, and an object its schema
rejects, found while writing, leaves the folder as it was."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

import workloads.output as output
from benchmarks.plan_bench import generate
from fleet.scheduler import schedule
from tests.manifests import cluster, deployment, gateway, gpu_class, run
from tests.rendering import rendered
from workloads import render as render_module
from workloads.output import InvalidObjects, OutputError, write
from workloads.render import render
from workloads.schemas import check


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def fleet_render():
    return rendered(*generate(30, 6))[1]


@pytest.fixture
def fleet_and_plan():
    loaded = run(*generate(30, 6))
    return loaded.fleet, schedule(loaded.fleet)


@pytest.mark.parametrize("jobs", [1, 3])
def test_writers_that_compose_the_model_stacks_write_the_same_files_as_one_process_given_every_object(
        tmp_path, monkeypatch, fleet_and_plan, jobs):
    """`render --out` leaves model stacks to the writers: the folder is the one a fully composed render gives."""
    monkeypatch.setattr(output, "PARALLEL_FROM", 10)
    monkeypatch.setattr(output, "CHUNK", 7)
    fleet, plan = fleet_and_plan
    whole, deferred = render(fleet, plan), render(fleet, plan, defer_models=True)
    assert deferred.deferred is not None and not any(deferred.stacks[s][t] for s in deferred.deferred.replicas
                                                      for t in deferred.stacks[s])  # nothing composed yet
    seen: list[int] = []
    one = write(whole, tmp_path / "one", jobs=1, check=check)
    several = write(deferred, tmp_path / "several", jobs=jobs, check=check, on_stacks=seen.append)
    assert one == several == sum(1 for _ in whole.objects()) > 10
    assert sum(seen) == len(whole.stacks) and len(seen) > 1
    assert tree(tmp_path / "one") == tree(tmp_path / "several")
    assert list(deferred.objects()) == list(whole.objects())  # a deferred render reads as the whole one


def test_forked_writers_write_the_same_files_as_one_process(tmp_path, monkeypatch, fleet_render):
    monkeypatch.setattr(output, "PARALLEL_FROM", 10)
    monkeypatch.setattr(output, "CHUNK", 7)
    seen: list[int] = []
    one = write(fleet_render, tmp_path / "one", jobs=1, check=check)
    several = write(fleet_render, tmp_path / "several", jobs=3, check=check, on_stacks=seen.append)
    assert one == several == sum(1 for _ in fleet_render.objects()) > 10
    assert sum(seen) == len(fleet_render.stacks) and len(seen) > 1
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


def _colliding():
    """Two teams' same-named deployments in the one shared namespace: their model stacks compose the same objects."""
    shared = gateway()
    shared["metadata"]["annotations"] = {"modelplane.ai/workload-namespaces": "Default"}
    loaded = run(gpu_class("l4", 1, "23034Mi"), cluster("a", pools=(("gpu", "l4", 4),)),
                 deployment("qwen", namespace="team-a", replicas=2), deployment("qwen", namespace="team-b"), shared)
    return loaded.fleet, schedule(loaded.fleet)


@pytest.mark.parametrize("jobs", [1, 3])
def test_writers_that_compose_the_model_stacks_refuse_their_collisions_and_leave_the_folder_as_it_was(
        tmp_path, monkeypatch, jobs):
    monkeypatch.setattr(output, "PARALLEL_FROM", 1)
    monkeypatch.setattr(output, "CHUNK", 1)  # each stack to a writer of its own
    fleet, plan = _colliding()
    whole = render(fleet, plan)
    expected = [str(p) for p in whole.problems]
    assert expected and all("already creates this object" in line for line in expected)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InvalidObjects) as refused:
        write(render(fleet, plan, defer_models=True), out, jobs=jobs, check=check)
    assert refused.value.problems == expected  # the same refusals as a render that composes everything first
    assert list(out.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_model_stack_that_writes_two_objects_to_one_file_is_refused_by_its_writer(tmp_path, monkeypatch, jobs):
    monkeypatch.setattr(output, "PARALLEL_FROM", 1)
    monkeypatch.setattr(output, "CHUNK", 1)
    real = render_module.compose_replica
    monkeypatch.setattr(render_module, "compose_replica", lambda ctx: (lambda objs: objs + objs[:1])(real(ctx)))
    loaded = run(*generate(6, 2))
    with pytest.raises(OutputError, match="two objects would be written to"):
        write(render(loaded.fleet, schedule(loaded.fleet), defer_models=True), tmp_path / "out", jobs=jobs, check=check)
    assert list(tmp_path.iterdir()) == []
