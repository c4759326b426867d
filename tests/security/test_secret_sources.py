"""Issue 65: a v1/Secret in the fleet's files may not replace, unsaid, a value the environment or --secrets-dir
gives (a pull request adding a Secret for modelplane-system would swap a cluster's kubeconfig)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from automation.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = [d for f in sorted((ROOT / "examples").rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
FORGED = "apiVersion: v1\nkind: Config\nclusters: [{name: theirs, cluster: {server: 'https://198.51.100.7'}}]\n"
GIVEN = "apiVersion: v1\nkind: Config\n# the operator's own\n"
VARIABLE = "MODELPLANE_SECRET_MODELPLANE_SYSTEM__BYO_EU_KUBECONFIG__KUBECONFIG"


def _fleet(tmp_path: pathlib.Path) -> str:
    forged = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "byo-eu-kubeconfig", "namespace": "modelplane-system"},
              "stringData": {"kubeconfig": FORGED}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([*EXAMPLES, forged], sort_keys=False))
    return str(path)


@pytest.mark.parametrize("source", ["environment", "secrets-dir"])
def test_a_secret_manifest_may_not_replace_what_the_environment_or_secrets_dir_gives(tmp_path, monkeypatch, capsys,
                                                                                     source):
    fleet, extra = _fleet(tmp_path), []
    if source == "environment":
        monkeypatch.setenv(VARIABLE, GIVEN)
        where = f"${VARIABLE}"
    else:
        monkeypatch.delenv(VARIABLE, raising=False)
        folder = tmp_path / "secrets" / "modelplane-system" / "byo-eu-kubeconfig"
        folder.mkdir(parents=True)
        (folder / "kubeconfig").write_text(GIVEN)
        extra, where = ["--secrets-dir", str(tmp_path / "secrets")], str(folder / "kubeconfig")
    assert main(["validate", "-f", fleet, *extra]) == 1
    out = capsys.readouterr()
    assert ("fleet.yaml:" in out.err and "Secret/byo-eu-kubeconfig: data.kubeconfig: Secret "
            f"modelplane-system/byo-eu-kubeconfig key 'kubeconfig' is also given by {where}: a Secret in the manifests "
            "may not replace a value the environment or --secrets-dir gives") in out.err
    assert "198.51.100.7" not in out.out + out.err and "operator's own" not in out.out + out.err  # never a value
    assert main(["plan", "-f", fleet, *extra]) == 1  # every command that loads the fleet refuses it


def test_a_secret_manifest_alone_is_still_read(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(VARIABLE, raising=False)
    assert main(["validate", "-f", _fleet(tmp_path)]) == 0
    assert "read Secret modelplane-system/byo-eu-kubeconfig" in capsys.readouterr().err
