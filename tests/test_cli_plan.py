"""`modelplane plan`: the JSON contract, order independence, exit codes and the table."""

import json
import pathlib
import random

import pytest
import yaml

from automation.cli import main
from tests.manifests import SHAPES, deployment, example_documents, example_paths, member

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.parametrize("shape", SHAPES)
def test_examples_plan_json_contract(capsys, shape):
    code, out, err = run_cli(capsys, "plan", *[a for path in example_paths(shape) for a in ("-f", path)], "-o", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert set(plan) >= {"replicas", "unscheduled"}
    assert plan["unscheduled"] == []
    by_deployment = {}
    for r in plan["replicas"]:
        assert set(r) >= {"deployment", "index", "name", "cluster", "engines"}
        by_deployment.setdefault(r["deployment"], []).append(r)
        for e in r["engines"]:
            assert set(e) >= {"name", "backend", "members"} and e["backend"] in {"native", "llm-d", "dynamo"}
            for m in e["members"]:
                assert set(m) >= {"role", "pool", "nodes", "devices"}
                assert all(isinstance(v, int) for v in m["devices"].values())
    assert len(by_deployment["ml-team/qwen3-8b"]) == 2
    assert {r["cluster"] for r in by_deployment["ml-team/qwen3-8b"]} == {"gke-us-central", "eks-us-west"}
    coder = by_deployment["ml-team/qwen3-coder"][0]
    assert coder["engines"][0]["backend"] == "llm-d"
    assert [(m["role"], m["nodes"], m["devices"]) for m in coder["engines"][0]["members"]] == [
        ("Leader", 1, {"gpu": 8}), ("Worker", 1, {"gpu": 8})]
    kimi = by_deployment["ml-team/kimi-k2"][0]
    assert kimi["cluster"] == "eks-us-west"  # the only us cluster with Hopper GPUs
    assert [e["backend"] for e in kimi["engines"]] == ["llm-d", "llm-d"]
    qwen = by_deployment["ml-team/qwen3-8b"][0]
    assert qwen["engines"][0]["backend"] == "native"


def test_json_is_byte_identical_in_any_file_and_document_order(tmp_path, capsys):
    documents = example_documents()
    code, baseline, _ = run_cli(capsys, "plan", "-f", str(EXAMPLES), "-o", "json")
    assert code == 0
    rnd = random.Random(3)
    for attempt in range(4):
        rnd.shuffle(documents)
        folder = tmp_path / f"shuffled{attempt}"
        folder.mkdir()
        split = rnd.randint(1, len(documents) - 1)
        (folder / "b.yaml").write_text(yaml.safe_dump_all(documents[:split]))
        (folder / "a.yaml").write_text(yaml.safe_dump_all(documents[split:]))
        code, out, _ = run_cli(capsys, "plan", "-f", str(folder / "b.yaml"), "-f", str(folder / "a.yaml"), "-o", "json")
        assert code == 0 and out == baseline


def test_unscheduled_replicas_still_exit_zero_with_reasons(tmp_path, capsys):
    path = tmp_path / "small.yaml"
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "platform/classes.yaml").read_text())]
    docs += list(yaml.safe_load_all((EXAMPLES / "platform/clusters.yaml").read_text()))
    big = yaml.safe_load((EXAMPLES / "models/qwen3-8b.yaml").read_text())
    big["spec"]["replicas"] = 10
    big["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"][0]["count"] = 8
    path.write_text(yaml.safe_dump_all(docs + [big]))
    code, out, _ = run_cli(capsys, "plan", "-f", str(path), "-o", "json")
    assert code == 0
    plan = json.loads(out)
    [entry] = plan["unscheduled"]
    assert entry["deployment"] == "ml-team/qwen3-8b" and entry["missing"] == 10 - len(plan["replicas"])
    assert any(r.startswith("gke-us-central/l4: engine vllm, standalone: request gpu needs 8 devices per node") for r in entry["reasons"])
    assert any(r.startswith("byo-eu: taint dedicated=research:NoSchedule") for r in entry["reasons"])


def test_invalid_input_exits_one_with_validate_format(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text((EXAMPLES / "models/qwen3-8b.yaml").read_text().replace("replicas: 2", "replicas: 20"))
    code, out, err = run_cli(capsys, "plan", "-f", str(path))
    assert code == 1 and out == ""
    assert f"{path}:8: ModelDeployment/qwen3-8b: spec.replicas: must be less than or equal to 10" in err


def test_table_and_explain(capsys):
    code, out, _ = run_cli(capsys, "plan", "-f", str(EXAMPLES), "--explain")
    assert code == 0
    assert "DEPLOYMENT" in out and "ml-team/qwen3-coder" in out and "4 replica(s) placed, 0 unscheduled" in out
    assert "explain ml-team/qwen3-8b:" in out
    assert "engine vllm: native" in out
    assert "not eligible: byo-eu: not selected (region=eu, wants region=us)" in out


def test_yaml_output_matches_json(capsys):
    _, as_json, _ = run_cli(capsys, "plan", "-f", str(EXAMPLES), "-o", "json")
    _, as_yaml, _ = run_cli(capsys, "plan", "-f", str(EXAMPLES), "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_observed_replicas_as_input_are_kept(tmp_path, capsys):
    _, out, _ = run_cli(capsys, "plan", "-f", str(EXAMPLES), "-o", "json")
    first = json.loads(out)
    coder = next(r for r in first["replicas"] if r["deployment"] == "ml-team/qwen3-coder")
    md = yaml.safe_load_all((EXAMPLES / "models/qwen3-coder.yaml").read_text())
    md = [d for d in md if d["kind"] == "ModelDeployment"][0]
    engine = md["spec"]["template"]["spec"]["engines"][0]
    observed = {
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
        "metadata": {"name": "qwen3-coder-old01", "namespace": "ml-team", "labels": {
            "modelplane.ai/deployment": "qwen3-coder", "modelplane.ai/cluster": "eks-us-west",
            "modelplane.ai/replica-index": "0"}},
        "spec": {"clusterName": "eks-us-west", "modelCacheRef": {"name": "qwen3-coder"}, "engines": [{
            "name": engine["name"], "members": [
                {"role": m["role"], "nodePoolName": "h100", **({"worker": m["worker"]} if "worker" in m else {}),
                 "deviceRequests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 8,
                                     "selectors": m["nodeSelector"]["devices"][0]["selectors"]}],
                 "template": m["template"]} for m in engine["members"]]}]},
    }
    path = tmp_path / "observed.yaml"
    path.write_text(yaml.safe_dump(observed))
    code, out, _ = run_cli(capsys, "plan", "-f", str(EXAMPLES), "-f", str(path), "-o", "json")
    assert code == 0
    replicas = [r for r in json.loads(out)["replicas"] if r["deployment"] == "ml-team/qwen3-coder"]
    assert [(r["name"], r["cluster"], r["state"]) for r in replicas] == [("qwen3-coder-old01", "eks-us-west", "kept")]
    assert coder["cluster"] == "byo-eu"  # without the observation it would have gone elsewhere


def test_plan_and_render_read_what_up_recorded_unless_fresh(tmp_path, monkeypatch, capsys):
    """A pull-request preview must show the placements `up` will keep, not a fresh plan's."""
    import json as _json

    import yaml as _yaml

    from automation.record.applied import record_output
    from fleet.memory import RecordedEngine, RecordedMember, RecordedReplica
    from fleet.names import replica_name
    from tests import pulumi_double
    from tests.manifests import cluster, deployment, gpu_class
    from tests.pulumi_engine import Backend

    work = pulumi_double.on_path(tmp_path, monkeypatch, "plan-test")  # the record is read through the CLI
    path = work / "fleet.yaml"
    path.write_text(_yaml.safe_dump_all([gpu_class(), cluster("c1"), cluster("c2"), deployment()]))
    assert main(["plan", "-f", str(path), "-o", "json"]) == 0
    fresh = _json.loads(capsys.readouterr().out)["replicas"]
    first = fresh[0]["cluster"]
    other = "c2" if first == "c1" else "c1"
    member = RecordedMember("Standalone", "gpu", 1, (("gpu", 1),))
    kept = RecordedReplica("ml-team", "qwen", replica_name("qwen", other, 0), other, 0,
                           (RecordedEngine("vllm", 1, (member,)),))
    folder = work / ".modelplane" / "backend"
    folder.mkdir(parents=True)
    backend = Backend(f"file://{folder}")  # a model stack as an `up` leaves it: its program's record in its outputs
    backend.create("modelplane-workloads", "model-ml-team.qwen")
    content = backend.load("modelplane-workloads", "model-ml-team.qwen")
    content["checkpoint"]["latest"]["resources"] = [{
        "urn": "urn:pulumi:model-ml-team.qwen::modelplane-workloads::pulumi:pulumi:Stack::"
               "modelplane-workloads-model-ml-team.qwen", "type": "pulumi:pulumi:Stack", "custom": False,
        "outputs": {"modelplane": record_output("fingerprint", [kept])}}]
    content["checkpoint"]["latest"]["manifest"] = {"time": "2026-12-01T00:00:00.250Z"}
    content["history"].append({"kind": "update", "result": "succeeded", "endTime": "2026-12-01T00:00:00.000Z"})
    backend.save("modelplane-workloads", "model-ml-team.qwen", content)
    assert main(["plan", "-f", str(path), "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert [r["cluster"] for r in _json.loads(out)["replicas"]] == [other]  # where `up` put it
    assert "1 applied replica(s) read from the Pulumi backend" in err
    assert main(["plan", "-f", str(path), "-o", "json", "--fresh"]) == 0
    assert [r["cluster"] for r in _json.loads(capsys.readouterr().out)["replicas"]] == [first]
    assert main(["render", "-f", str(path), "--out", str(work / "r")]) == 0
    assert (work / "r" / "model-ml-team.qwen" / other).is_dir()


def test_plan_filters_and_the_unscheduled_gate(tmp_path, capsys):
    import json as _json

    examples = str(pathlib.Path(__file__).resolve().parent.parent / "examples")
    assert main(["plan", "-f", examples, "-o", "json", "--fresh"]) == 0
    everything = _json.loads(capsys.readouterr().out)
    assert main(["plan", "-f", examples, "-o", "json", "--fresh", "-n", "ml-team", "--deployment", "qwen3-8b"]) == 0
    only = _json.loads(capsys.readouterr().out)
    assert {r["deployment"] for r in only["replicas"]} == {"ml-team/qwen3-8b"}
    assert only["replicas"] == [r for r in everything["replicas"] if r["deployment"] == "ml-team/qwen3-8b"]
    assert main(["plan", "-f", examples, "-o", "json", "--fresh", "-n", "nobody"]) == 0
    assert _json.loads(capsys.readouterr().out)["replicas"] == []
    assert main(["plan", "-f", examples, "--fresh", "--fail-on-unscheduled"]) == 0  # everything placed
    huge = tmp_path / "huge.yaml"
    huge.write_text(yaml.safe_dump(deployment("huge", replicas=10, engines=[{"name": "vllm", "members": [member(gpus=8)]}])))
    assert main(["plan", "-f", examples, "-f", str(huge), "--fresh", "--fail-on-unscheduled", "-o", "json"]) == 4
    assert "cannot be placed (--fail-on-unscheduled)" in capsys.readouterr().err
    assert main(["plan", "-f", examples, "-f", str(huge), "--fresh", "--fail-on-unscheduled", "-n", "other"]) == 0


def test_render_to_stdout_and_rendered_folders_are_not_read_back_as_manifests(tmp_path, capsys):
    examples = pathlib.Path(__file__).resolve().parent.parent / "examples"
    assert main(["render", "-f", str(examples), "--out", "-"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert len(docs) == 72 and {d["kind"] for d in docs} >= {"Deployment", "HTTPRoute", "LeaderWorkerSet", "Namespace",
                                                        "NetworkPolicy", "ResourceQuota"}
    tree = tmp_path / "fleet"
    import shutil

    shutil.copytree(examples, tree)
    assert main(["render", "-f", str(tree), "--out", str(tree / "rendered")]) == 0
    capsys.readouterr()
    assert main(["validate", "-f", str(tree)]) == 0  # the rendered objects beside the manifests are skipped
    assert capsys.readouterr().out.strip().endswith("17 objects valid")


def test_tables_never_cut_identifiers(tmp_path, capsys):
    from tests.manifests import cluster, gpu_class

    long_name = "a-deployment-with-a-rather-long-name-" + "x" * 150
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([gpu_class(), cluster("c1"), deployment(long_name)]))
    assert main(["plan", "-f", str(path), "--fresh"]) == 0
    out = capsys.readouterr().out
    assert f"ml-team/{long_name}" in out and "…" not in out
    assert main(["plan", "-f", str(path), "--fresh", "-o", "name"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith("modelreplica/ml-team/a-deployment-with-a-rather-long-name-")


def test_commands_are_listed_in_workflow_order(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    # a command's line starts two spaces in; its wrapped summary continues further in
    listed = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.startswith("  ")
              and not line.startswith("   ")]
    assert listed[:4] == ["validate", "explain", "schema", "plan"] and listed.index("up") < listed.index("destroy")


def test_every_command_has_an_example_and_every_option_a_description(capsys):
    from automation.cli import cli

    for name, command in cli.commands.items():
        assert main([name, "--help"]) == 0
        out = capsys.readouterr().out
        assert "Example:" in out and f"modelplane {name}" in out.split("Example:")[1], name
        for param in command.params:
            if isinstance(param, __import__("click").Option):
                assert param.help, f"{name} {param.opts}: no description"
