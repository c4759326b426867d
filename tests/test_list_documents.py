"""`kubectl get ... -o yaml` writes a `v1/List`; read back with -f, it is read item by item (issue 29), so
observed placements saved that way are kept, and an error inside points at its own line."""

from __future__ import annotations

import json
import pathlib

import yaml

from automation.cli import main
from fleet.validate import load_fleet
from tests.manifests import example_files

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _as_list(paths: list[pathlib.Path], kind: str = "List") -> str:
    items = [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]
    return yaml.safe_dump({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": ""}, "items": items},
                          sort_keys=False)


def test_a_list_loads_the_same_objects_as_its_items(tmp_path):
    files = example_files()
    listed = tmp_path / "all.yaml"
    listed.write_text(_as_list(files))
    separate, together = load_fleet([str(ROOT / "examples")]), load_fleet([str(listed)])
    assert not together.errors
    assert sorted(o.ref for o in together.fleet.objects) == sorted(o.ref for o in separate.fleet.objects)


def test_observed_replicas_saved_as_a_list_keep_their_placement(tmp_path, capsys):
    observed = ROOT / "examples" / "observed" / "qwen3-8b-gke.yaml"
    listed = tmp_path / "observed.yaml"
    listed.write_text(_as_list([observed], kind="ModelReplicaList"))
    platform, models = str(ROOT / "examples" / "platform"), str(ROOT / "examples" / "models")

    def plan(extra: str) -> list:
        assert main(["plan", "-f", platform, "-f", models, "-f", extra, "-o", "json", "--fresh"]) == 0
        return json.loads(capsys.readouterr().out)["replicas"]

    replicas = plan(str(listed))
    assert ("qwen3-8b-a02c0", "kept") in [(r["name"], r["state"]) for r in replicas]
    assert replicas == plan(str(observed))


def test_an_error_inside_a_list_names_the_items_line(tmp_path, capsys):
    listed = tmp_path / "list.yaml"
    listed.write_text("apiVersion: v1\nkind: List\nitems:\n"
                      "- apiVersion: modelplane.ai/v1alpha1\n  kind: InferenceClass\n  metadata: {name: x}\n"
                      "  spec:\n    devices:\n    - {name: gpu, driver: gpu.nvidia.com, count: 1, bogus: 1}\n")
    assert main(["validate", "-f", str(listed)]) == 1
    assert f"{listed}:9: InferenceClass/x: spec.devices[0].bogus: unknown field" in capsys.readouterr().err
