"""`modelplane validate`: exit codes, located one-line errors, loading from files, folders and stdin."""

import io
import pathlib
import re
import sys

import pytest
import yaml

from automation.cli import main
from tests.manifests import SHAPES, example_paths

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<rest>.+)$")


def run_cli(capsys, *args, stdin: bytes | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


@pytest.mark.parametrize("shape", SHAPES)
def test_examples_validate(capsys, shape):
    code, out, err = run_cli(capsys, "validate", *[a for path in example_paths(shape) for a in ("-f", path)])
    assert code == 0, err
    assert re.search(r"^InferenceCluster:\s+3 valid", out, re.M)
    assert re.search(r"^ModelDeployment:\s+3 valid", out, re.M)
    # an example of every kind, ModelEndpoint and (observed) ModelReplica included, and this project's addition
    # TeamPolicy (examples/teams/, in both shapes' fleets)
    additions = {"TeamPolicy"}
    assert {line.split(":")[0] for line in out.splitlines() if " valid " in line} == {
        "InferenceClass", "InferenceCluster", "InferenceGateway", "ModelCache", "ModelDeployment", "ModelReplica",
        "ModelEndpoint", "ModelService", *additions}
    assert out.strip().endswith("17 objects valid")


BAD_DEPLOYMENT = """\
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: qwen
  namespace: ml-team
spec:
  replicas: 1
  template:
    spec:
      engines:
        - name: vllm
          copies: 0
          members:
            - role: Standalone
              nodeSelector:
                devices:
                  - name: gpu
                    selectors:
                      - cel: 'device.capacity['
              template:
                spec:
                  containers:
                    - name: engine
                      image: vllm
                      resources: {}
"""


def test_errors_are_located_to_the_field_line(tmp_path, capsys):
    path = write(tmp_path, "md.yaml", BAD_DEPLOYMENT)
    code, out, err = run_cli(capsys, "validate", "-f", path)
    assert code == 1
    lines = [line for line in err.splitlines() if LINE.match(line)]
    assert f"{path}:12: ModelDeployment/qwen: spec.template.spec.engines[0].copies: must be greater than or equal to 1" in lines
    assert f"{path}:25: ModelDeployment/qwen: spec.template.spec.engines[0].members[0].template.spec.containers[0].resources: unknown field" in lines
    assert out == ""


def test_rule_errors_are_located_after_structure_is_fixed(tmp_path, capsys):
    text = BAD_DEPLOYMENT.replace("copies: 0", "copies: 1").replace("                      resources: {}\n", "")
    path = write(tmp_path, "md.yaml", text)
    code, _, err = run_cli(capsys, "validate", "-f", path)
    assert code == 1
    assert f"{path}:19: ModelDeployment/qwen: spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel: CEL syntax error" in err


def test_second_document_lines_count_from_file_start(tmp_path, capsys):
    good = (ROOT / "examples/platform/gateway.yaml").read_text()
    path = write(tmp_path, "two.yaml", good + "---\n" + BAD_DEPLOYMENT)
    offset = good.count("\n") + 1
    code, _, err = run_cli(capsys, "validate", "-f", path)
    assert code == 1
    assert f"{path}:{12 + offset}: ModelDeployment/qwen: spec.template.spec.engines[0].copies" in err


@pytest.mark.parametrize("name,content,fragment", [
    ("syntax.yaml", "a: [1, 2\n", ":2: YAML syntax error"),
    ("tabs.yaml", "a:\n\t- b\n", ":2: YAML syntax error"),
    ("binary.yaml", b"\x00\x01\x02\xff", ":1: binary file"),
    ("latin1.yaml", "name: caf\xe9\n".encode("latin-1"), ":1: file is not UTF-8 text"),
    ("control.yaml", "a: \x07\n", ":1: not readable as YAML"),
    ("list.yaml", "- a\n- b\n", ":1: expected a Kubernetes object (a mapping with apiVersion and kind), found a list"),
    ("scalar.yaml", "just text\n", ":1: expected a Kubernetes object"),
    ("noapi.yaml", "kind: ModelService\n", ":1: ModelService/?: apiVersion: required"),
    ("nokind.yaml", "apiVersion: modelplane.ai/v1alpha1\nmetadata: {name: x}\n", "kind: required"),
    ("badkind.yaml", "apiVersion: modelplane.ai/v1alpha1\nkind: ModelRouter\nmetadata: {name: x}\n",
     ":2: ModelRouter/x: kind: unknown kind 'ModelRouter'"),
    ("badversion.yaml", "apiVersion: modelplane.ai/v1beta1\nkind: ModelService\nmetadata: {name: x}\n",
     ":1: ModelService/x: apiVersion: unsupported version"),
    ("metadata-list.yaml", "apiVersion: modelplane.ai/v1alpha1\nkind: ModelService\nmetadata: [1]\nspec: {}\n",
     ":3: ModelService/?: metadata: must be a valid dictionary"),
    ("spec-list.yaml", "apiVersion: modelplane.ai/v1alpha1\nkind: ModelService\nmetadata: {name: x}\nspec: [a]\n",
     ":4: ModelService/x: spec: must be a valid dictionary"),
    ("dupkey.yaml", "apiVersion: modelplane.ai/v1alpha1\nkind: ModelService\nkind: ModelService\nmetadata: {name: x}\n"
     "spec: {endpoints: [{selector: {matchLabels: {a: b}}}]}\n", ":3: kind: duplicate key 'kind'"),
    ("deep.yaml", "[" * 5000 + "]" * 5000, ":1: "),
    ("unhashable.yaml", "? [a, b]\n: c\n", "YAML syntax error"),
])
def test_malformed_input_gets_one_located_line(tmp_path, capsys, name, content, fragment):
    path = write(tmp_path, name, content)
    code, out, err = run_cli(capsys, "validate", "-f", path)
    assert code == 1
    problem_lines = [line for line in err.splitlines() if line.startswith(path)]
    assert problem_lines, err
    assert any(fragment in line for line in problem_lines), err


def test_empty_file_and_no_objects(tmp_path, capsys):
    code, _, err = run_cli(capsys, "validate", "-f", write(tmp_path, "empty.yaml", ""))
    assert code == 1 and "no modelplane.ai objects found" in err


def test_foreign_objects_are_skipped_with_a_note(tmp_path, capsys):
    text = ("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml-team}\n---\n"
            "apiVersion: infrastructure.modelplane.ai/v1alpha1\nkind: ServingStack\nmetadata: {name: s}\nspec: {}\n---\n"
            + (ROOT / "examples/platform/gateway.yaml").read_text())
    code, out, err = run_cli(capsys, "validate", "-f", write(tmp_path, "mixed.yaml", text))
    assert code == 0
    assert "note:" in err and "skipped v1 Namespace/ml-team (not a modelplane.ai object)" in err
    assert "skipped ServingStack/s" in err
    assert "1 objects valid" in out


def test_stdin(capsys, monkeypatch):
    text = (ROOT / "examples/models/qwen3-8b.yaml").read_bytes()
    code, out, _ = run_cli(capsys, "validate", "-f", "-", stdin=text, monkeypatch=monkeypatch)
    assert code == 0 and "ml-team/qwen3-8b" in out


def test_stdin_errors_name_stdin(capsys, monkeypatch):
    code, _, err = run_cli(capsys, "validate", "-f", "-", stdin=b"apiVersion: modelplane.ai/v1alpha1\nkind: X\n",
                           monkeypatch=monkeypatch)
    assert code == 1 and "<stdin>:2: X/?: kind: unknown kind 'X'" in err


def test_folder_is_recursive_and_ignores_other_files(tmp_path, capsys):
    write(tmp_path, "a/b/c/gw.yml", (ROOT / "examples/platform/gateway.yaml").read_text())
    write(tmp_path, "a/README.md", "not yaml: [")
    write(tmp_path, "a/.hidden/x.yaml", "not yaml: [")
    code, out, _ = run_cli(capsys, "validate", "-f", str(tmp_path / "a"))
    assert code == 0 and "InferenceGateway:" in out


def test_repeatable_paths_and_duplicates(tmp_path, capsys):
    gw = str(ROOT / "examples/platform/gateway.yaml")
    code, _, err = run_cli(capsys, "validate", "-f", gw, "-f", gw)
    assert code == 1
    assert "duplicate object: InferenceGateway/default is also defined at" in err


def test_missing_path(capsys):
    code, _, err = run_cli(capsys, "validate", "-f", "/nonexistent/fleet")
    assert code == 1 and "/nonexistent/fleet: no such file or folder" in err


def test_usage_error_exits_2(capsys):
    code, _, err = run_cli(capsys, "validate")
    assert code == 2 and "Missing option '-f'" in err


def test_cross_object_checks(tmp_path, capsys):
    text = """\
apiVersion: modelplane.ai/v1alpha1
kind: InferenceClass
metadata: {name: l4}
spec:
  provisioning: {provider: EKS, eks: {instanceType: g6.xlarge}}
  devices: [{name: gpu, driver: gpu.nvidia.com, deviceClassName: gpu.nvidia.com}]
---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata: {name: gke}
spec:
  cluster: {source: GKE, gke: {region: us-central1}}
  nodePools:
    - {name: a, className: l4}
    - {name: b, className: missing}
"""
    path = write(tmp_path, "x.yaml", text)
    code, _, err = run_cli(capsys, "validate", "-f", path)
    assert code == 1
    assert f"{path}:14: InferenceCluster/gke: spec.nodePools[0].className: InferenceClass 'l4' provisions for EKS, but this cluster's source is GKE" in err
    # a provisioned pool without its class is an error (it would be a GPU-less pool you pay for), with a suggestion
    assert (f"{path}:15: InferenceCluster/gke: spec.nodePools[1].className: InferenceClass 'missing' is not among the "
            "given manifests: a GKE pool cannot be created without its machine type and accelerators") in err
    typo = write(tmp_path, "typo.yaml", text.replace("className: missing", "className: l4x"))
    code, _, err = run_cli(capsys, "validate", "-f", typo)
    assert code == 1 and "InferenceClass 'l4x' is not among the given manifests (did you mean 'l4'?)" in err
    field = write(tmp_path, "field.yaml", text.replace("- {name: a, className: l4}", "- {name: a, className: l4, nodeCout: 2}"))
    code, _, err = run_cli(capsys, "validate", "-f", field)
    assert code == 1 and "spec.nodePools[0].nodeCout: unknown field (did you mean 'nodeCount'?)" in err


def test_defaults_are_applied():
    from tests.manifests import cluster, deployment, gpu_class, run
    loaded = run(deployment(), cluster(source="GKE"), gpu_class())
    md = loaded.fleet.of("ModelDeployment")[0]
    engine = md.spec.template.spec.engines[0]
    assert engine.copies == 1 and engine.members[0].role == "Standalone"
    assert md.spec.template.spec.mode == "Unified"
    ic = loaded.fleet.of("InferenceCluster")[0]
    assert ic.spec.cluster.gke.kubernetesVersion == "1.35" and ic.spec.nodePools[0].nodeCount == 1
    assert loaded.fleet.of("InferenceClass")[0].spec.devices[0].claim == "DRA"


def test_vultr_and_civo_sources_validate_without_a_warning(tmp_path, capsys):
    """Both are provisioned (components/vultr.py, components/civo.py): no longer refused as unprovisioned."""
    from tests.manifests import cluster, gpu_class

    for source, block, provisioning in (("Vultr", {"region": "ewr"}, {"plan": "vcg-l40s-16c-180g-48vram"}),
                                        ("Civo", {"region": "LON1"}, {"size": "an.g1.l40s.kube.x1"})):
        ic = cluster("c", source="GKE")
        ic["spec"]["cluster"] = {"source": source, source.lower(): block}
        icl = gpu_class()
        icl["spec"]["provisioning"] = {"provider": source, source.lower(): provisioning}
        path = tmp_path / f"{source}.yaml"
        path.write_text(yaml.safe_dump_all([icl, ic]))
        code = main(["validate", "-f", str(path)])
        _, err = capsys.readouterr()
        warnings = [line for line in err.splitlines() if "warning:" in line]
        # Civo's one warning: no GPU Operator installs the driver yet (tests/test_components_vultr_civo.py)
        assert code == 0 and all("GPU Operator on Civo" in w for w in warnings) and len(warnings) == (
            source == "Civo"), err


def test_validate_json_lists_objects_and_located_problems(tmp_path, capsys):
    import json

    good = pathlib.Path(__file__).resolve().parent.parent / "examples"
    assert main(["validate", "-f", str(good), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is True and len(out["objects"]) == 17 and out["problems"] == []
    assert {"kind": "ModelDeployment", "name": "qwen3-8b", "namespace": "ml-team", "shape": "both"} in out["objects"]
    # the shape each object was read in: the examples' services and endpoint are v0.5, the gateway still v0.3.1
    shapes = {o["kind"]: o["shape"] for o in out["objects"] if o["kind"] in ("InferenceGateway", "ModelService",
                                                                            "ModelEndpoint")}
    assert shapes == {"InferenceGateway": "v0.3.1", "ModelService": "v0.5", "ModelEndpoint": "v0.5"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: modelplane.ai/v1alpha1\nkind: ModelDeploymnt\nmetadata: {name: x, namespace: a}\n")
    assert main(["validate", "-f", str(bad), "-o", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and out["problems"][0]["severity"] == "error" and out["problems"][0]["line"] == 2
    assert "did you mean 'ModelDeployment'?" in out["problems"][0]["message"]
