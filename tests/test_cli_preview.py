"""`modelplane preview --offline`: every platform stack's program under mocks, secrets masked."""

import json
import pathlib

import yaml

from automation.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_offline_preview_json(capsys):
    code = main(["preview", "--offline", "-f", str(ROOT / "examples"), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    stacks = {s["name"]: s for s in json.loads(out)["stacks"]}
    assert {"gateway", "platform-byo-eu", "platform-eks-us-west", "platform-gke-us-central"} <= set(stacks)
    for stack in stacks.values():
        assert stack["resources"] and "error" not in stack
        for r in stack["resources"]:
            assert set(r) >= {"type", "name", "parent", "inputs"}
    gke = stacks["platform-gke-us-central"]["resources"]
    pool = next(r for r in gke if r["name"] == "gke-us-central-l4")
    assert pool["type"] == "gcp:container/nodePool:NodePool" and pool["parent"] == "gke-us-central"
    assert pool["inputs"]["nodeConfig"]["guestAccelerators"][0]["type"] == "nvidia-l4"
    providers = [r for s in stacks.values() for r in s["resources"] if r["type"] == "pulumi:providers:kubernetes"]
    assert providers and all(p["inputs"]["kubeconfig"] == "[secret]" for p in providers)
    assert "offline preview: no kubeconfig" not in out and "BEGIN" not in out


def test_offline_preview_table_and_bad_input(tmp_path, capsys):
    code = main(["preview", "--offline", "-f", str(ROOT / "stacks" / "fleets" / "aws-prod")])
    out, _ = capsys.readouterr()
    assert code == 0 and "stack platform-prod-us-east:" in out and "aws:eks/nodeGroup:NodeGroup" in out
    assert "nothing was deployed" in out
    bad = tmp_path / "bad.yaml"
    docs = list(yaml.safe_load_all((ROOT / "stacks" / "fleets" / "aws-prod" / "fleet.yaml").read_text()))
    docs[2]["spec"]["nodePools"][0]["capacityBlock"]["capacityReservationId"] = "nope"
    bad.write_text(yaml.safe_dump_all(docs))
    code = main(["preview", "--offline", "-f", str(bad)])
    _, err = capsys.readouterr()
    assert code == 1 and "capacityReservationId" in err and "Traceback" not in err


def test_preview_without_offline_needs_the_cli_and_says_so(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PULUMI_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(["preview", "-f", str(ROOT / "examples")])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and lines[0].startswith("error: `preview` needs") and lines[0].endswith("not given here:")
    assert lines[1].startswith("  - the Pulumi CLI is not installed: ")  # one line per problem, the CLI first


def _base_and_head(tmp_path):
    """A generated fleet, and the same with one deployment's image changed."""
    from benchmarks.plan_bench import generate

    objects = generate(8, 8)
    base, head = tmp_path / "base.yaml", tmp_path / "head.yaml"
    base.write_text(yaml.safe_dump_all(objects))
    changed = [o for o in objects if o["kind"] == "ModelDeployment"][2]
    changed["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["image"] = \
        "vllm/vllm-openai:v0.12.0"
    head.write_text(yaml.safe_dump_all(objects))
    return base, head, f"model-{changed['metadata']['namespace']}.{changed['metadata']['name']}"


def test_offline_preview_of_what_changed_against_a_base(tmp_path, capsys):
    """A pull request's preview: only the stacks that differ, with what they depend on and what depends on
    them (for the deployability check), not the whole fleet."""
    base, head, model = _base_and_head(tmp_path)
    assert main(["preview", "--offline", "-f", str(head), "-o", "json"]) == 0
    full = {s["name"]: s for s in json.loads(capsys.readouterr().out)["stacks"]}
    code = main(["preview", "--offline", "-f", str(head), "--changed-against", str(base), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    assert document["changes"] == [{"name": model, "change": "update"}]
    previewed = {s["name"]: s for s in document["stacks"]}
    clusters = {r["cluster"] for r in full[model]["resources"] if r.get("cluster")}
    assert model in previewed and len(previewed) < len(full)
    # a model stack on none of its clusters neither changed nor meets it: not previewed
    assert [name for name, s in full.items() if name.startswith("model-") and name in previewed
            and not clusters & {r.get("cluster") for r in s["resources"]}] == []
    team = model.split(".")[0].removeprefix("model-")
    assert clusters and {f"platform-{c}" for c in clusters} | {f"team-{team}.{c}" for c in clusters} <= set(previewed)
    assert previewed[model] == full[model]  # the same preview as in the full run
    assert document["violations"] == []
    code = main(["preview", "--offline", "-f", str(head), "--changed-against", str(base)])
    out, _ = capsys.readouterr()
    assert code == 0 and f"{model} (update)" in out and "what depends on them), 0 violations" in out


def test_a_pull_requests_preview_composes_only_the_stacks_it_previews(tmp_path, capsys, monkeypatch):
    """`preview --changed-against` and `review`: the head is composed once, as `plan --against` composes it (the
    stacks whose inputs differ from the base's), and then the stacks previewed beside them: a deployment on clusters
    the change does not touch is neither previewed nor composed (composing the whole head first was most of the
    command's own time at 2,000 deployments)."""
    from workloads import render as render_module

    base, head, model = _base_and_head(tmp_path)
    composed: set[str] = set()
    real = render_module.compose_replica
    monkeypatch.setattr(render_module, "compose_replica",
                        lambda ctx: composed.add(f"model-{ctx.md.namespace}.{ctx.md.name}") or real(ctx))
    code = main(["preview", "--offline", "-f", str(head), "--changed-against", str(base), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    every = [s["name"] for s in json.loads(out)["stacks"]]
    previewed = {name for name in every if name.startswith("model-")}
    assert model in composed and composed <= previewed
    assert len(previewed) < len({o["metadata"]["name"] for o in yaml.safe_load_all(head.read_text())
                                 if o["kind"] == "ModelDeployment"})
    composed.clear()  # `review` previews the same stacks the same way
    assert main(["review", "-f", str(head), "--against", str(base)]) == 0
    assert model in composed and composed <= previewed
    assert f"{len(every)} stack(s) previewed offline" in capsys.readouterr().out


def test_a_control_plane_asked_for_is_the_bases_too(tmp_path, capsys):
    """`--control-plane X` with a base that has X: the base is planned on X as the head is, so a deployment's change
    is that deployment's stack alone (the gateway stack, which holds its host, is not shown as changed)."""
    base, head, model = _base_and_head(tmp_path)
    gateway = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "default"},
               "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}}
    for path in (base, head):
        path.write_text(path.read_text() + "---\n" + yaml.safe_dump(gateway))
    code = main(["preview", "--offline", "-f", str(head), "--changed-against", str(base), "-o", "json",
                 "--control-plane", "cluster-0005"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["changes"] == [{"name": model, "change": "update"}]
    code = main(["review", "-f", str(head), "--against", str(base), "--control-plane", "cluster-0005"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "**1 stack(s) change**" in out and f"| `{model}` | update |" in out


def test_changed_against_needs_offline(tmp_path, capsys):
    base, head, _ = _base_and_head(tmp_path)
    assert main(["preview", "-f", str(head), "--changed-against", str(base)]) == 2
    assert "add --offline" in capsys.readouterr().err


def test_what_a_check_of_changed_stacks_must_see():
    from automation.checks.offline_preview import around
    from automation.planning.stacks import StackSpec
    from fleet.stack_id import StackId

    def spec(name, *deps):
        return StackSpec(StackId.parse(name), "fp", list(deps))

    specs = {s.name: s for s in [
        spec("platform-a"), spec("platform-b"), spec("gateway", "platform-a"),
        spec("team-t.a", "platform-a"), spec("team-t.b", "platform-b"),
        spec("model-t.m", "platform-a", "team-t.a"), spec("model-t.n", "platform-b", "team-t.b"),
        spec("endpoints-t", "model-t.m", "model-t.n", "platform-a"), spec("service-t.s", "gateway", "endpoints-t")]}
    # a model: it, what routes to it (and what that needs), what it needs
    assert around(specs, {"model-t.m"}) == {"model-t.m", "endpoints-t", "service-t.s", "platform-a", "team-t.a",
                                            "model-t.n", "platform-b", "team-t.b", "gateway"}
    assert around(specs, {"service-t.s"}) == {"service-t.s", "gateway", "endpoints-t", "platform-a", "model-t.m",
                                              "model-t.n", "platform-b", "team-t.a", "team-t.b"}
    assert around(specs, {"team-t.b"}) >= {"model-t.n", "endpoints-t", "service-t.s"}
    assert around(specs, {"platform-x"}) == set()  # a stack to delete has no program to preview


def test_a_check_of_a_changed_stack_sees_every_other_stack_on_its_clusters():
    """One object with two owners on a cluster is refused (`one-owner`): a new model stack is checked with the
    other stacks writing to its clusters, though neither depends on the other; those on other clusters, and the
    control plane's (each service's objects are its own), are not previewed."""
    from automation.checks.offline_preview import around
    from automation.planning.stacks import StackSpec
    from fleet.stack_id import StackId

    def spec(name, targets, *deps):
        return StackSpec(StackId.parse(name), "fp", list(deps), list(targets))

    specs = {s.name: s for s in [
        spec("platform-a", ["a"]), spec("platform-b", ["b"]), spec("platform-c", ["c"]),
        spec("team-t.a", ["a"], "platform-a"), spec("team-u.a", ["a"], "platform-a"), spec("team-u.c", ["c"], "platform-c"),
        spec("model-t.new", ["a"], "platform-a", "team-t.a"),
        spec("model-u.old", ["a", "b"], "platform-a", "platform-b", "team-u.a"),
        spec("model-u.far", ["c"], "platform-c", "team-u.c"),
        spec("endpoints-u", ["control-plane"], "model-u.old", "model-u.far")]}
    seen = around(specs, {"model-t.new"})
    assert seen == {"model-t.new", "platform-a", "team-t.a", "team-u.a", "model-u.old", "platform-b"}
    assert "model-u.far" not in seen and "endpoints-u" not in seen


def test_the_control_plane_is_its_host_cluster_for_the_check():
    """A service's HTTPRoute and a model's objects on the host cluster can collide (`one-owner` compares the
    cluster objects land on): a changed control-plane stack is checked with the host's stacks, and the other way."""
    from automation.checks.offline_preview import around
    from automation.planning.payloads import WorkloadPayload
    from automation.planning.stacks import StackSpec
    from fleet.stack_id import StackId

    def spec(name, targets, *deps, host=None):
        payload = WorkloadPayload({t: [] for t in targets}, "test", host) if host else None
        return StackSpec(StackId.parse(name), "fp", list(deps), list(targets), payload)

    specs = {s.name: s for s in [
        spec("platform-a", ["a"]), spec("platform-c", ["c"]),
        spec("model-t.on-host", ["a"], "platform-a"), spec("model-t.far", ["c"], "platform-c"),
        spec("service-t.new", ["control-plane"], "platform-a", host="a"),
        spec("service-t.other", ["control-plane"], "platform-a", host="a")]}
    assert around(specs, {"service-t.new"}) == {"service-t.new", "platform-a", "model-t.on-host", "service-t.other"}
    assert "service-t.new" in around(specs, {"model-t.on-host"})
    assert "service-t.new" not in around(specs, {"model-t.far"})


def test_every_road_checks_the_whole_fleet_when_a_run_destroys_a_stack(monkeypatch):
    """One rule for the CLI and the portal's worker (`undeployable` takes the changes): an update sees its
    neighbourhood, a run that destroys anything (the portal turns an `up` of a stack no longer wanted into one)
    sees every stack."""
    from automation.checks import deployability, offline_preview
    from automation.planning.stacks import Change, StackChange, StackSpec
    from fleet.stack_id import StackId

    seen: list = []
    monkeypatch.setattr(offline_preview, "all_stacks", lambda fleet, **kw: seen.append(kw["only"]) or [])
    monkeypatch.setattr(deployability, "check_fleet", lambda fleet, previews, specs=None: [])
    specs = {s.name: s for s in [StackSpec(StackId.parse("platform-a"), "fp", [], ["a"]),
                                 StackSpec(StackId.parse("platform-b"), "fp", [], ["b"])]}
    deployability.undeployable(None, specs, [StackChange(StackId.parse("platform-a"), Change.update)])
    deployability.undeployable(None, specs, [StackChange(StackId.parse("platform-a"), Change.update),
                                             StackChange(StackId.parse("model-t.gone"), Change.delete)])
    deployability.undeployable(None, specs, None)
    assert seen == [{"platform-a"}, None, None]


def test_streamed_json_is_the_one_document_json_dumps_writes():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from automation.cli.output import stream_json

    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                          max_leaves=12)

    @settings(max_examples=200, deadline=None)
    @given(st.dictionaries(st.text(), values | st.lists(values, max_size=4), max_size=4))
    def same(document):
        pieces: list[str] = []
        stream_json(document, pieces.append)
        assert "".join(pieces) == json.dumps(document, indent=2, sort_keys=True, default=str)
        lazy = {k: (iter(v) if isinstance(v, list) else v) for k, v in document.items()}  # items made as written
        pieces.clear()
        stream_json(lazy, pieces.append)
        assert "".join(pieces) == json.dumps(document, indent=2, sort_keys=True, default=str)

    same()


def test_a_base_summarised_for_one_pull_request_serves_the_next_exactly(tmp_path, capsys):
    """`plan --against` composes only what differs from the head it is given and keeps a partial summary; a later
    pull request that changes another deployment needs fingerprints that summary lacks: `plan --against` and
    `preview --changed-against` then plan the base again, and answer as with no cache."""
    from benchmarks.plan_bench import generate

    objects = generate(8, 8)
    base, first, second = tmp_path / "base.yaml", tmp_path / "first.yaml", tmp_path / "second.yaml"
    base.write_text(yaml.safe_dump_all(objects))
    deployments = [o for o in objects if o["kind"] == "ModelDeployment"]
    image = deployments[2]["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    image["image"] = "vllm/vllm-openai:v0.12.0"
    first.write_text(yaml.safe_dump_all(objects))
    image["image"] = "vllm/vllm-openai:v0.11.0"
    deployments[5]["spec"]["replicas"] = deployments[5]["spec"].get("replicas", 1) + 1
    second.write_text(yaml.safe_dump_all(objects))
    second_model = f"model-{deployments[5]['metadata']['namespace']}.{deployments[5]['metadata']['name']}"

    def plan(head: pathlib.Path, *extra: str) -> dict:
        assert main(["plan", "-f", str(head), "--against", str(base), "-o", "json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    plan(first)  # keeps the base's summary, knowing only the first head's changed stack
    uncached = plan(second, "--no-cache")
    assert plan(second) == uncached
    assert [s for s in uncached["changes"]["stacks"] if s["change"] != "none" and s["name"].startswith("model-")] \
        == [{"name": second_model, "change": "update"}]
    plan(first)
    assert main(["preview", "--offline", "-f", str(second), "--changed-against", str(base), "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {c["name"] for c in document["changes"] if c["name"].startswith("model-")} == {second_model}
