"""`render --out`: forked writers compose and write the model stacks while the command composes and writes the
others; the folder is the one a whole render written by one process gives, and an object its schema rejects, a
problem of the render or a collision, found while writing, leaves the folder as it was."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

import workloads.output as output
from benchmarks.plan_bench import generate
from components.args import control_plane_cluster
from fleet.problems import Problem
from fleet.scheduler import schedule
from tests.manifests import cluster, deployment, gateway, gpu_class, run, service
from workloads import render as render_module
from workloads.output import InvalidObjects, OutputError, render_to, write
from workloads.render import ModelStacks, render
from workloads.output import MARKER
from workloads.schemas import check
from workloads.yamlio import dump


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None), by path."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def reference(rendered) -> dict[str, bytes | None]:
    """The folder as the layout describes it, written by nothing but the reference YAML writer: the marker, and
    <stack>/<target>/<kind>-<name>.yaml for each object."""
    out: dict[str, bytes | None] = {MARKER: b"written by modelplane render; the whole folder is replaced each time\n"}
    for stack, target, obj in rendered.objects():
        out[stack] = out[f"{stack}/{target}"] = None
        out[f"{stack}/{target}/{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"] = dump(obj).encode()
    return dict(sorted(out.items()))


class Recorder:
    def __init__(self):
        self.total: int | None = None
        self.steps: list[int] = []

    def expect(self, total: int) -> None:
        self.total = total

    def advance(self, steps: int = 1) -> None:
        self.steps.append(steps)


@pytest.fixture
def fleet_and_plan():
    loaded = run(*generate(30, 6))
    return loaded.fleet, schedule(loaded.fleet)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(output, "PARALLEL_FROM", 10)
    monkeypatch.setattr(output, "CHUNK", 7)


@pytest.mark.parametrize("jobs", [1, 3])
def test_writers_that_compose_the_model_stacks_write_the_files_one_process_writes_of_a_whole_render(
        tmp_path, small_chunks, fleet_and_plan, jobs):
    fleet, plan = fleet_and_plan
    host = control_plane_cluster(fleet, None)
    whole = render(fleet, plan, host)
    progress = Recorder()
    one = write(whole, tmp_path / "one", jobs=1, check=check)
    several, rendered = render_to(tmp_path / "several", fleet, plan, host, progress=progress, jobs=jobs, check=check)
    assert one == several == sum(1 for _ in whole.objects()) > 10
    assert tree(tmp_path / "one") == tree(tmp_path / "several") == reference(whole)
    assert progress.total == len(whole.stacks) == sum(progress.steps) and len(progress.steps) > 1
    assert rendered.deferred is not None and not any(rendered.stacks[s][t] for s in rendered.deferred.replicas
                                                      for t in rendered.stacks[s])  # composed by the writers alone
    assert list(rendered.objects()) == list(whole.objects())  # a deferred render reads as the whole one
    deferred = write(render(fleet, plan, host, deferred=ModelStacks(fleet, plan)), tmp_path / "deferred", jobs=jobs,
                     check=check)
    assert deferred == one and tree(tmp_path / "deferred") == tree(tmp_path / "one")


def test_an_invalid_object_of_a_whole_render_leaves_the_folder_as_it_was(tmp_path, fleet_and_plan):
    fleet, plan = fleet_and_plan
    whole = render(fleet, plan)
    out = tmp_path / "out"
    write(whole, out, check=check)
    before = tree(out)
    broken = copy.deepcopy(whole)
    objects = [obj for _, _, obj in broken.objects()]
    objects[3]["spec"] = "not an object"
    last = max(i for i, obj in enumerate(objects) if isinstance(obj.get("spec"), dict))
    objects[last]["spec"] = 7
    with pytest.raises(InvalidObjects) as refused:
        write(broken, out, check=check)
    assert len(refused.value.problems) >= 2
    assert f"{objects[3]['kind']}/{objects[3]['metadata']['name']}" in refused.value.problems[0]  # in render order
    assert f"{objects[last]['kind']}/{objects[last]['metadata']['name']}" in refused.value.problems[-1]
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left behind


@pytest.mark.parametrize("jobs", [1, 3])
def test_an_invalid_object_a_writer_composes_leaves_the_folder_as_it_was(tmp_path, small_chunks, monkeypatch,
                                                                         fleet_and_plan, jobs):
    fleet, plan = fleet_and_plan
    out = tmp_path / "out"
    render_to(out, fleet, plan, None, check=check)
    before = tree(out)
    real, real_team = render_module.compose_replica, render_module.team_objects
    broken_replicas = {plan.replicas[1].name, plan.replicas[-1].name}

    def broken(ctx):
        objects = real(ctx)
        if ctx.name in broken_replicas:
            objects[0]["spec"] = "not an object"
        return objects

    def broken_team(*args, **kwargs):  # composed and written by the command itself, before the writers finish
        objects = real_team(*args, **kwargs)
        objects[0]["spec"] = "not an object"
        return objects

    monkeypatch.setattr(render_module, "compose_replica", broken)
    monkeypatch.setattr(render_module, "team_objects", broken_team)
    with pytest.raises(InvalidObjects) as refused:
        render_to(out, fleet, plan, None, jobs=jobs, check=check)
    stacks = [line.split("/")[0] for line in refused.value.problems]
    assert stacks == sorted(stacks)  # in render order, whichever process found them
    models = {render_module.model_stack(r.namespace, r.deployment) for r in plan.replicas if r.name in broken_replicas}
    assert [s for s in stacks if s.startswith("model-")] == sorted(models) and stacks[-1].startswith("team-")
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def _colliding_objects() -> list[dict]:
    """Two teams' same-named deployments in the one shared namespace: their model stacks compose the same objects."""
    shared = gateway()
    shared["metadata"]["annotations"] = {"modelplane.ai/workload-namespaces": "Default"}
    return [gpu_class("l4", 1, "23034Mi"), cluster("a", pools=(("gpu", "l4", 4),)),
            deployment("qwen", namespace="team-a", replicas=2), deployment("qwen", namespace="team-b"), shared]


def _colliding():
    loaded = run(*_colliding_objects())
    return loaded.fleet, schedule(loaded.fleet)


@pytest.mark.parametrize("jobs", [1, 3])
def test_writers_that_compose_the_model_stacks_refuse_their_collisions_and_leave_the_folder_as_it_was(
        tmp_path, monkeypatch, jobs):
    monkeypatch.setattr(output, "PARALLEL_FROM", 1)
    monkeypatch.setattr(output, "CHUNK", 1)  # each stack to a writer of its own
    fleet, plan = _colliding()
    expected = [str(p) for p in render(fleet, plan).problems]
    assert expected and all("already creates this object" in line for line in expected)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InvalidObjects) as refused:
        render_to(out, fleet, plan, None, jobs=jobs, check=check)
    assert refused.value.problems == expected  # the same refusals as a render that composes everything first
    with pytest.raises(InvalidObjects) as again:
        write(render(fleet, plan, deferred=ModelStacks(fleet, plan)), out, jobs=jobs, check=check)
    assert again.value.problems == expected
    assert list(out.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_problem_of_the_render_and_collisions_are_refused_together_before_any_schema_problem(tmp_path, monkeypatch):
    """As when they were looked for before writing: the render's problems (here a service's overflow endpoint,
    which Traefik cannot route) and the collisions, not the schema problems of objects written meanwhile."""
    monkeypatch.setattr(output, "PARALLEL_FROM", 1)
    monkeypatch.setattr(output, "CHUNK", 1)
    fleet_objects = _colliding_objects()
    overflow = service("front", "team-a")
    overflow["spec"]["endpoints"][0]["priority"] = 1
    loaded = run(*fleet_objects, overflow)
    plan = schedule(loaded.fleet)
    expected = [str(p) for p in render(loaded.fleet, plan).problems]
    assert any("priority" in line for line in expected) and any("already creates" in line for line in expected)
    real = render_module.compose_replica
    monkeypatch.setattr(render_module, "compose_replica",
                        lambda ctx: [{**obj, "spec": 7} if i == 0 else obj for i, obj in enumerate(real(ctx))])
    for jobs in (1, 3):
        with pytest.raises(InvalidObjects) as refused:
            render_to(tmp_path / "out", loaded.fleet, plan, None, jobs=jobs, check=check)
        assert refused.value.problems == expected
    assert list(tmp_path.iterdir()) == []


def test_a_problem_of_the_render_is_refused_though_the_writers_started(tmp_path, small_chunks, monkeypatch,
                                                                      fleet_and_plan):
    fleet, plan = fleet_and_plan
    real = render_module.render

    def with_a_problem(*args, **kwargs):
        out = real(*args, **kwargs)
        out.problems.append(Problem("service-x.y", 0, "ModelService/y", "spec", "a routing problem"))
        return out

    monkeypatch.setattr(output, "render", with_a_problem)
    with pytest.raises(InvalidObjects) as refused:
        render_to(tmp_path / "out", fleet, plan, None, jobs=3, check=check)
    assert len(refused.value.problems) == 1 and "a routing problem" in refused.value.problems[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_model_stack_that_writes_two_objects_to_one_file_is_refused_by_its_writer(tmp_path, monkeypatch, jobs):
    monkeypatch.setattr(output, "PARALLEL_FROM", 1)
    monkeypatch.setattr(output, "CHUNK", 1)
    real = render_module.compose_replica
    monkeypatch.setattr(render_module, "compose_replica", lambda ctx: (lambda objs: objs + objs[:1])(real(ctx)))
    loaded = run(*generate(6, 2))
    with pytest.raises(OutputError, match="two objects would be written to"):
        render_to(tmp_path / "out", loaded.fleet, schedule(loaded.fleet), None, jobs=jobs, check=check)
    assert list(tmp_path.iterdir()) == []
