"""Issue 65: a v1/Secret in the fleet's files may not replace, unsaid, a value the environment or --secrets-dir
gives (a pull request adding a Secret for modelplane-system would swap a cluster's kubeconfig)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from automation.cli import main

from tests.manifests import example_documents

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = example_documents()  # examples/, less its v0.3.1 variant (tests/manifests.py)
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
        extra, where = ["--secrets-dir", str(tmp_path / "secrets")], f"--secrets-dir {folder / 'kubeconfig'}"
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


KUBECONFIG_VARIABLE = "MODELPLANE_KUBECONFIG_BYO_EU"
MANIFEST_SOURCE = "Secret manifest"


@pytest.fixture
def no_ambient_sources(monkeypatch):
    for name in (VARIABLE, KUBECONFIG_VARIABLE):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("given", ["--kubeconfig", "variable", "state folder"])
def test_the_runner_refuses_a_secret_manifest_replacing_the_kubeconfig_it_is_given(tmp_path, monkeypatch, capsys,
                                                                                    no_ambient_sources, given):
    """The program reads the fleet's secret store before the kubeconfig file it is given: a manifest would win."""
    from automation.execution.prerequisites import existing_kubeconfigs
    from automation.execution.runner import AutomationError
    from fleet.validate import load_fleet

    kubeconfig, state = tmp_path / "byo-eu.yaml", tmp_path / "state"
    kubeconfig.write_text(GIVEN)
    pairs, extra, where = {}, [], ""
    if given == "--kubeconfig":
        pairs, extra, where = {"byo-eu": str(kubeconfig)}, ["--kubeconfig", f"byo-eu={kubeconfig}"], "--kubeconfig byo-eu="
    elif given == "variable":
        monkeypatch.setenv(KUBECONFIG_VARIABLE, str(kubeconfig))
        where = f"${KUBECONFIG_VARIABLE}"
    else:
        (state / "kubeconfigs").mkdir(parents=True)
        (state / "kubeconfigs" / "byo-eu-kubeconfig").write_text(GIVEN)
        where = str(state / "kubeconfigs" / "byo-eu-kubeconfig")
    fleet = _fleet(tmp_path)
    loaded = load_fleet([fleet])
    assert not loaded.errors
    with pytest.raises(AutomationError) as refused:  # what the CLI's runner and the portal's worker both ask
        existing_kubeconfigs(loaded.fleet, pairs, state)
    said = str(refused.value)
    assert said.startswith(f"{fleet}:") and "\n" not in said
    if given != "--kubeconfig":  # the portal's worker builds its runner through the same question
        from automation.portal.worker import pulumi_runner

        with pytest.raises(AutomationError, match="may not replace the kubeconfig"):
            pulumi_runner()(loaded.fleet, state)
    assert ("Secret modelplane-system/byo-eu-kubeconfig key 'kubeconfig' gives InferenceCluster/byo-eu's kubeconfig, "
            f"which {where}") in said and "may not replace the kubeconfig" in said
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "pw")
    monkeypatch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", "hf_test")
    assert main(["up", "-f", fleet, "--state", str(state), *extra]) != 0
    out = capsys.readouterr()
    assert said in out.err and "Traceback" not in out.err
    assert "198.51.100.7" not in out.out + out.err and "operator's own" not in out.out + out.err  # never a value


def _sides(tmp_path: pathlib.Path) -> tuple[str, str]:
    base = tmp_path / "base" / "fleet.yaml"
    base.parent.mkdir()
    base.write_text(yaml.safe_dump_all(EXAMPLES, sort_keys=False))
    (tmp_path / "head").mkdir()
    return str(base), _fleet(tmp_path / "head")


@pytest.mark.parametrize("command", ["review", "plan"])
def test_a_kubeconfig_moving_from_the_environment_to_a_manifest_is_a_stack_change_naming_both(tmp_path, monkeypatch,
                                                                                             capsys, no_ambient_sources,
                                                                                             command):
    """Issue 65: a Secret for modelplane-system in a pull request replaced a cluster's kubeconfig, and `review`
    said "No stack changes"."""
    kubeconfig = tmp_path / "byo-eu.yaml"
    kubeconfig.write_text(GIVEN)
    monkeypatch.setenv(KUBECONFIG_VARIABLE, str(kubeconfig))
    base, head = _sides(tmp_path)
    args = ["review", "-f", head, "--against", base] if command == "review" else \
        ["plan", "--fresh", "-f", head, "--against", base, "-o", "markdown"]
    main(args)
    out = capsys.readouterr()
    assert "| `platform-byo-eu` | update |" in out.out
    assert ("- `platform-byo-eu`: `Secret modelplane-system/byo-eu-kubeconfig key 'kubeconfig': "
            f"{MANIFEST_SOURCE} {head}:") in out.out
    assert (f", and ${KUBECONFIG_VARIABLE} (the runner refuses the two) (base: ${KUBECONFIG_VARIABLE})`"
            in out.out)
    assert "198.51.100.7" not in out.out + out.err and "operator's own" not in out.out + out.err  # never a value


def test_a_kubeconfig_a_pull_request_adds_as_a_manifest_is_a_stack_change(tmp_path, capsys, no_ambient_sources):
    """As on a CI runner, which is given no kubeconfig: the base's comes from where `up` runs."""
    base, head = _sides(tmp_path)
    main(["review", "-f", head, "--against", base])
    out = capsys.readouterr().out
    assert "No stack changes" not in out and "| `platform-byo-eu` | update |" in out
    assert (f"Secret modelplane-system/byo-eu-kubeconfig key 'kubeconfig': {MANIFEST_SOURCE} {head}:") in out
    assert "(base: not given here)`" in out
    main(["review", "-f", head, "--against", head])  # the same sources on both sides: nothing changes
    assert "No stack changes" in capsys.readouterr().out


def test_moving_a_value_between_the_environment_and_secrets_dir_changes_no_stack(tmp_path, monkeypatch,
                                                                                  no_ambient_sources):
    """Only whether a manifest gives a secret is fingerprinted: machines that run the same fleet give theirs as
    they do."""
    from automation.planning.stacks import desired_state
    from fleet.validate import load_fleet

    examples = str(ROOT / "examples")
    monkeypatch.setenv(VARIABLE, GIVEN)
    from_environment = desired_state(load_fleet([examples]).fleet).specs["platform-byo-eu"].fingerprint
    monkeypatch.delenv(VARIABLE)
    folder = tmp_path / "secrets" / "modelplane-system" / "byo-eu-kubeconfig"
    folder.mkdir(parents=True)
    (folder / "kubeconfig").write_text(GIVEN)
    from_folder = desired_state(load_fleet([examples], secrets_dir=tmp_path / "secrets").fleet)
    assert from_folder.specs["platform-byo-eu"].fingerprint == from_environment
    from_manifest = desired_state(load_fleet([_fleet(tmp_path)]).fleet).specs["platform-byo-eu"].fingerprint
    assert from_manifest != from_environment


def test_a_cache_token_from_a_manifest_changes_the_cache_stack_and_is_named(tmp_path, monkeypatch, capsys,
                                                                            no_ambient_sources):
    token = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": "ml-team"},
             "stringData": {"HF_TOKEN": "hf_from_the_pull_request"}}
    base, head = tmp_path / "base.yaml", tmp_path / "head.yaml"
    base.write_text(yaml.safe_dump_all(EXAMPLES, sort_keys=False))
    head.write_text(yaml.safe_dump_all([*EXAMPLES, token], sort_keys=False))
    monkeypatch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", "hf_the_operators")
    assert main(["validate", "-f", str(head)]) == 1  # loading refuses the two (fleet/validate.py)
    monkeypatch.delenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN")
    capsys.readouterr()
    main(["review", "-f", str(head), "--against", str(base)])
    out = capsys.readouterr()
    assert "| `cache-ml-team.qwen3-coder` | update |" in out.out
    assert (f"- `cache-ml-team.qwen3-coder`: `Secret ml-team/hf-token key 'HF_TOKEN': {MANIFEST_SOURCE} {head}:"
            in out.out and "(base: not given here)`" in out.out)
    assert "hf_from_the_pull_request" not in out.out + out.err
