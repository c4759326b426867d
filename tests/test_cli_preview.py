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
    assert code == 2 and err.strip().splitlines() == [err.strip().splitlines()[0]]  # one line
    assert "the Pulumi CLI is not installed" in err
