"""Issue 28: a Secret reference resolves only inside its own namespace, from sources that cannot be confused:
environment names no two references share, --secrets-dir files that are one segment each and inside the folder,
and Secret manifests that name their namespace."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from automation.cli import main
from fleet.secrets import SecretRef, SecretStore

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("theirs, mine", [
    (SecretRef("ml-team", "hf", "tok"), SecretRef("ml", "team-hf", "tok")),  # last round's finding
    (SecretRef("a-b", "c-d", "k"), SecretRef("a", "b-c-d", "k")),
    (SecretRef("a", "b", "c-d"), SecretRef("a", "b-c", "d")),
])
def test_another_namespaces_variable_is_never_read(theirs, mine):
    environ = {theirs.environment_variable: "theirs", theirs.ambiguous_variable: "theirs"}
    assert SecretStore(environ=environ).get(theirs).reveal() == "theirs"
    assert SecretStore(environ=environ).get(mine) is None
    assert theirs.environment_variable != mine.environment_variable


def test_a_reference_that_cannot_be_named_unambiguously_has_no_variable():
    for ref in (SecretRef("a--b", "c", "k"), SecretRef("a", "b--c", "k"), SecretRef("a", "b.c", "k")):
        assert ref.environment_variable is None
        assert "$" not in SecretStore(environ={}).where_to_put(ref)


def test_the_old_variable_is_named_as_ignored_so_a_user_knows_why(tmp_path):
    ref = SecretRef("ml-team", "hf-token", "HF_TOKEN")
    store = SecretStore(environ={"MODELPLANE_SECRET_ML_TEAM_HF_TOKEN_HF_TOKEN": "old"})
    assert store.get(ref) is None
    assert "$MODELPLANE_SECRET_ML_TEAM_HF_TOKEN_HF_TOKEN is set but no longer read" in store.where_to_put(ref)


@pytest.mark.parametrize("key", ["/etc/hostname", "../../../etc/hostname", "..", "a/b"])
def test_a_secrets_dir_key_outside_one_segment_reads_nothing(tmp_path, key):
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "hostname").write_text("not yours\n")
    folder = tmp_path / "secrets" / "ml-team" / "hf"
    folder.mkdir(parents=True)
    assert SecretStore(environ={}, directory=tmp_path / "secrets").get(SecretRef("ml-team", "hf", key)) is None


def test_a_link_out_of_the_secrets_dir_is_not_followed_but_a_mounted_secrets_own_links_are(tmp_path):
    secrets = tmp_path / "secrets"
    (secrets / "ml-team" / "hf" / "..data").mkdir(parents=True)
    (secrets / "ml-team" / "hf" / "..data" / "HF_TOKEN").write_text("mounted\n")
    (secrets / "ml-team" / "hf" / "HF_TOKEN").symlink_to("..data/HF_TOKEN")  # as the kubelet mounts a Secret
    (tmp_path / "elsewhere").write_text("not yours\n")
    (secrets / "ml-team" / "hf" / "OTHER").symlink_to(tmp_path / "elsewhere")
    store = SecretStore(environ={}, directory=secrets)
    assert store.get(SecretRef("ml-team", "hf", "HF_TOKEN")).reveal() == "mounted"
    assert store.get(SecretRef("ml-team", "hf", "OTHER")) is None


@pytest.mark.parametrize("link", ["key", "name", "namespace"])
def test_a_link_in_one_namespaces_folder_never_reaches_anothers(tmp_path, link):
    """Issue 65: the link stayed inside --secrets-dir, so it was followed into the other namespace's folder."""
    secrets = tmp_path / "secrets"
    (secrets / "other-ns" / "hf").mkdir(parents=True)
    (secrets / "other-ns" / "hf" / "HF_TOKEN").write_text("other-ns's token\n")
    (secrets / "ml-team").mkdir()
    if link == "key":  # ml-team/hf/HF_TOKEN -> ../../other-ns/hf/HF_TOKEN
        (secrets / "ml-team" / "hf").mkdir()
        (secrets / "ml-team" / "hf" / "HF_TOKEN").symlink_to("../../other-ns/hf/HF_TOKEN")
    elif link == "name":  # ml-team/hf -> ../other-ns/hf
        (secrets / "ml-team" / "hf").symlink_to("../other-ns/hf")
    else:  # the namespace's folder itself
        (secrets / "ml-team").rmdir()
        (secrets / "ml-team").symlink_to("other-ns")
    store = SecretStore(environ={}, directory=secrets)
    assert store.get(SecretRef("other-ns", "hf", "HF_TOKEN")).reveal() == "other-ns's token"
    assert store.get(SecretRef("ml-team", "hf", "HF_TOKEN")) is None


def _cache_fleet(tmp_path, auth: dict, extra: list[dict] = ()) -> pathlib.Path:
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "models" / "qwen3-coder.yaml").read_text()) if d]
    next(d for d in docs if d["kind"] == "ModelCache")["spec"]["huggingFace"]["authSecret"] = auth
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump_all([*docs, *extra]))
    return path


@pytest.mark.parametrize("auth, field", [
    ({"name": "hf", "key": "/etc/hostname"}, "authSecret.key"),
    ({"name": "hf", "key": "../../x"}, "authSecret.key"),
    ({"name": "../hf", "key": "tok"}, "authSecret.name"),
    ({"name": "hf", "key": 'x}${gke.outputs["kubeconfig"]'}, "authSecret.key"),
])
def test_validate_refuses_a_secret_reference_that_is_not_a_kubernetes_name_and_key(tmp_path, capsys, auth, field):
    model = _cache_fleet(tmp_path, auth)
    assert main(["validate", "-f", str(ROOT / "examples" / "platform"), "-f", str(model)]) != 0
    err = capsys.readouterr().err
    assert f"{model}:" in err and "ModelCache/qwen3-coder" in err and field in err and "Traceback" not in err


def test_a_secret_manifest_without_a_namespace_is_refused_not_given_to_every_namespace(tmp_path, capsys):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"}, "stringData": {"HF_TOKEN": "x"}}
    model = _cache_fleet(tmp_path, {"name": "hf-token"}, [secret])
    assert main(["validate", "-f", str(ROOT / "examples" / "platform"), "-f", str(model)]) != 0
    err = capsys.readouterr().err
    assert "Secret/hf-token" in err and "metadata.namespace" in err and "own namespace" in err
