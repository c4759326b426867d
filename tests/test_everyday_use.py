"""Everyday use, round three: what `validate` says when it matters (issue 32's CLI findings), one case each."""

from __future__ import annotations

import pytest

from tests.manifests import cluster, deployment, errors, gpu_class, run, service


def test_a_zone_outside_its_clusters_region_is_refused():
    eks = cluster("e", source="EKS", pools=(("p", "l4", 1),))
    eks["spec"]["cluster"]["eks"]["region"] = "us-west2"  # a typo of us-west-2
    eks["spec"]["nodePools"][0]["zones"] = ["us-west-2a"]
    found = errors(gpu_class("l4", provider="EKS"), eks)
    assert found == ["spec.nodePools[0].zones[0]: zone 'us-west-2a' is not in the cluster's region 'us-west2' "
                     "(EKS zones there start with 'us-west2')"]
    eks["spec"]["cluster"]["eks"]["region"] = "us-west-2"
    assert errors(gpu_class("l4", provider="EKS"), eks) == []
    gke = cluster("g", source="GKE", pools=(("p", "l4", 1),))
    gke["spec"]["nodePools"][0]["zones"] = ["us-east1-b"]
    assert [e.split(":")[0] for e in errors(gpu_class("l4", provider="GKE"), gke)] == ["spec.nodePools[0].zones[0]"]


def test_an_invalid_class_is_reported_once_not_also_as_missing():
    bad = gpu_class("l4")
    bad["spec"]["devices"][0]["count"] = "x"
    found = errors(bad, gpu_class("l40"), cluster("c", pools=(("p", "l4", 1),)))
    assert found == ["spec.devices[0].count: must be a valid integer"]


def test_errors_come_in_file_and_line_order():
    bad = gpu_class("z")
    bad["spec"]["devices"][0]["count"] = "x"
    loaded = run(cluster("c", pools=(("p", "missing", 1),), source="GKE"), bad)
    assert [p.line for p in loaded.errors] == sorted(p.line for p in loaded.errors) and len(loaded.errors) == 2


def test_a_service_whose_selector_matches_nothing_is_a_warning():
    md = deployment("qwen")
    chat, ok = service("chat"), service("ok")
    chat["spec"]["endpoints"][0]["selector"]["matchLabels"] = {"app": "nothing"}
    ok["spec"]["endpoints"][0]["selector"]["matchLabels"]["modelplane.ai/cluster"] = "anywhere"  # placement's to say
    loaded = run(md, chat, ok)
    assert loaded.errors == []
    assert [(p.object, p.path) for p in loaded.warnings] == [
        ("ModelService/chat", "spec.endpoints[0].selector.matchLabels")]
    assert "routes nothing" in loaded.warnings[0].message


def _labelled(obj: dict, labels: dict, template: bool = False) -> dict:
    if template:
        obj["spec"]["template"]["metadata"] = {"labels": labels}
    else:
        obj["metadata"]["labels"] = labels
    return obj


@pytest.mark.parametrize("wanted,warned", [
    ({"app": "chat", "tier": "gold"}, False),  # both carried by one deployment's replicas
    ({"app": "chat", "tier": "silver"}, True),  # each carried, by different candidates: none carries both
    ({"app": "hosted"}, False),  # a ModelEndpoint's label
    ({"modelplane.ai/deployment": "qwen"}, False),  # every replica carries its deployment's name
    ({"modelplane.ai/deployment": "qwen", "app": "chat"}, False),
    ({"modelplane.ai/deployment": "other", "app": "chat"}, True),
    ({"modelplane.ai/cluster": "anywhere"}, False),  # placement's labels are not asked of the manifests
], ids=["same-one", "different-ones", "endpoint", "deployment", "deployment-and-label", "no-such-pair", "placement"])
def test_a_service_entry_is_warned_about_only_when_no_one_candidate_carries_all_its_labels(wanted, warned):
    from tests.manifests import endpoint

    chat = service("chat")
    chat["spec"]["endpoints"][0]["selector"]["matchLabels"] = wanted
    loaded = run(_labelled(deployment("qwen"), {"app": "chat", "tier": "gold"}, template=True),
                 _labelled(deployment("other"), {"tier": "silver"}, template=True),
                 _labelled(endpoint("hosted"), {"app": "hosted"}),
                 _labelled(deployment("elsewhere", namespace="team-b"), {"app": "chat", "tier": "silver"}, template=True),
                 chat)
    assert loaded.errors == []
    assert [p.object for p in loaded.warnings if "routes nothing" in p.message] == (["ModelService/chat"] if warned else [])


# ---- what the command line prints ------------------------------------------------------------------------------

def test_help_lists_each_command_with_its_whole_first_sentence(capsys, monkeypatch):
    from automation.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out.split("Commands:", 1)[1]
    joined = " ".join(listed.split())  # wrapped lines joined
    assert "..." not in listed
    assert "status Which stacks are applied, which are pending, and what is unscheduled (from the record; without " \
        "the Pulumi CLI, from its local cache, and it says so)." in joined


def test_a_plan_table_on_a_narrow_terminal_never_folds_an_identifier(monkeypatch):
    import io

    from automation.cli.output import plan_table
    from fleet.scheduler import schedule
    from fleet.validate import load_fleet

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("COLUMNS", "80")
    plan = schedule(load_fleet(["examples"]).fleet)
    stream = Terminal()
    plan_table(plan, stream=stream)
    text = stream.getvalue()
    header = next(line for line in text.splitlines() if "DEPLOYMENT" in line)
    assert "DEVICES/POD" in header and "STATE" in header  # one header line, no word wrapped
    for r in plan.replicas:
        assert r.name in text and r.key in text


def test_plan_explain_says_what_the_score_means(capsys):
    from automation.cli import main

    assert main(["plan", "-f", "examples", "--explain", "--deployment", "ml-team/qwen3-8b"]) == 0
    out = capsys.readouterr().out
    assert "(score: 0 replica(s) of it already there, claims " in out and "stranded)" in out


def test_the_install_hint_names_this_interpreter():
    import sys

    from automation.execution.runner import INSTALL_HINT

    assert f"{sys.executable} -c 'from pulumi import automation" in INSTALL_HINT


def test_status_has_a_header_row(capsys):
    from automation.cli import main

    assert main(["status", "-f", "examples", "--state", "/nonexistent-state-dir-for-test"]) in (0, 1)
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("STACK"))
    assert lines[header].split() == ["STACK", "STATE", "APPLIED", "WHY"] and lines[header + 1].startswith("platform-")


def test_preview_offline_lists_what_the_first_real_run_needs(capsys, monkeypatch, tmp_path):
    import json

    from automation.cli import main

    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    examples = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "examples")
    assert main(["preview", "--offline", "-f", examples, "-o", "json"]) == 0
    needs = json.loads(capsys.readouterr().out)["needs"]
    assert [n.split(":")[0] for n in needs] == ["set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE)",
                                                "InferenceCluster/byo-eu is Existing",
                                                "cache-ml-team.qwen3-coder"]
    assert not [n for n in needs if "hf_" in n]  # where to give each, never a value
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "x")
    monkeypatch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", "hf_secret_value")
    assert main(["preview", "--offline", "-f", examples]) == 0
    out = capsys.readouterr().out
    assert "a real `modelplane up` of these stacks needs 1 thing(s) not given here:" in out
    assert "InferenceCluster/byo-eu is Existing" in out and "hf_secret_value" not in out


def test_up_says_everything_a_first_run_lacks_at_once_before_the_cli(capsys, monkeypatch, tmp_path):
    from automation.cli import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi
    monkeypatch.delenv("PULUMI_HOME", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.chdir(tmp_path)
    examples = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "examples")
    assert main(["up", "-f", examples]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "error: `up` needs 4 thing(s) not given here:"  # everything at once, one line each
    for line, said in zip(err[1:], ("the Pulumi CLI is not installed", "set PULUMI_CONFIG_PASSPHRASE",
                                    "InferenceCluster/byo-eu is Existing",
                                    "cache-ml-team.qwen3-coder: Secret ml-team/hf-token key 'HF_TOKEN' has no value"),
                          strict=True):
        assert line.startswith(f"  - {said}")


def test_a_tokens_file_with_several_bad_entries_names_each():
    import pytest

    from automation.portal.auth import Tokens, TokensFileError

    text = ("- {name: a, token: '" + "x" * 32 + "', namespaces: [team-a]}\n"
            "- {name: b, namespaces: team-b}\n"
            "- {name: c, token: '" + "y" * 32 + "', admin: 'yes'}\n")
    with pytest.raises(TokensFileError) as refused:
        Tokens.parse(text, "tokens.yaml")
    message = str(refused.value)
    assert message.startswith("tokens.yaml: ") and "b" in message and "namespaces" in message and "admin" in message
    assert "x" * 32 not in message and "y" * 32 not in message  # never a token
