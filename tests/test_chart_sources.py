"""Chart sources (components/versions.py `located`): an air-gapped fleet's platform stacks install every chart from a
mirror repository or a folder on the machine, set once as stack config `modelplane:chartSources`."""

from __future__ import annotations

import json
import pathlib

import pytest

from automation.checks.offline import OfflineRunError
from components.args import cluster_args
from components.kubernetes import provider
from components.serving_stack import ServingStack
from components.versions import CHARTS, chart, chart_sources_problems
from fleet.validate import load_fleet
from components.platform import platform
from tests.pulumi_mocks import inputs, of_type, registered

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("sources, key, repo, local", [
    ({}, "lws", "oci://registry.k8s.io/lws/charts", None),
    ({"*": "oci://mirror.example/charts/"}, "lws", "oci://mirror.example/charts", None),
    ({"*": "https://mirror.example/helm", "lws": "/srv/charts/lws"}, "lws", "oci://registry.k8s.io/lws/charts",
     "/srv/charts/lws"),
    ({"*": "https://mirror.example/helm"}, "cert-manager", "https://mirror.example/helm", None),
    ({"keda": "/srv/keda-2.20.2.tgz"}, "cert-manager", "https://charts.jetstack.io", None),
])
def test_a_chart_is_fetched_where_its_source_says_at_its_pinned_version(sources, key, repo, local):
    spec = chart(key, None, sources)
    assert (spec.repo, spec.local, spec.version) == (repo, local, CHARTS[key].version)


@pytest.mark.parametrize("value, problem", [
    (["oci://x"], "must be a mapping"),
    ({"cert-manger": "/srv/x"}, "chartSources.cert-manger: not a chart the platform installs"),
    ({"lws": ""}, "chartSources.lws: must be a chart folder"),
    ({"lws": "charts/lws"}, "neither an absolute path nor a repository URL"),
    ({"lws": 3}, "chartSources.lws: must be a chart folder"),
])
def test_a_bad_chart_sources_setting_is_named(value, problem):
    assert any(problem in p for p in chart_sources_problems(value))


def test_a_serving_stack_installs_local_charts_without_a_repository_and_mirrored_ones_from_the_mirror():
    fleet = load_fleet([str(ROOT / "examples")]).fleet
    args = cluster_args(fleet, "gke-us-central")
    sources = {"*": "oci://mirror.example/charts", "cert-manager": "/srv/charts/cert-manager"}
    resources = registered(lambda: ServingStack("s", args, provider("c", "k"), sources=sources))
    releases = {inputs(r)["name"]: inputs(r) for r in of_type(resources, "kubernetes:helm.sh/v3:Release")}
    assert releases["mp-cert-manager"]["chart"] == "/srv/charts/cert-manager"
    assert "repositoryOpts" not in releases["mp-cert-manager"] or not releases["mp-cert-manager"]["repositoryOpts"]
    assert releases["mp-lws"]["chart"] == "oci://mirror.example/charts/lws"
    assert all(r["chart"].startswith(("oci://mirror.example/charts/", "/srv/")) for r in releases.values())


KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
"""


def test_the_platform_program_reads_chart_sources_from_stack_config_and_refuses_a_bad_one(tmp_path):
    fleet = load_fleet([str(ROOT / "examples")]).fleet
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    good = {"modelplane:chartSources": json.dumps({"*": "oci://mirror.example/charts"}), "modelplane:cluster": "byo-eu",
            "modelplane:gateway": "false", "modelplane:kubeconfigFile": str(tmp_path / "kubeconfig")}
    resources = registered(lambda: platform(fleet), config=good)
    charts = {inputs(r)["chart"] for r in of_type(resources, "kubernetes:helm.sh/v3:Release")}
    assert charts and all(c.startswith("oci://mirror.example/charts/") for c in charts)
    bad = {**good, "modelplane:chartSources": json.dumps({"lws": "relative/path"})}
    with pytest.raises(OfflineRunError, match="chartSources.lws"):
        registered(lambda: platform(fleet), config=bad)


@pytest.mark.parametrize("pair, message", [
    ("lws=relative/lws", "chartSources.lws: 'relative/lws' is neither an absolute path nor a repository URL"),
    ("lws", "--chart-source 'lws': expected KEY=SOURCE"),
    ("nope=/srv/x", "chartSources.nope: not a chart the platform installs"),
])
def test_a_bad_chart_source_flag_is_one_line_and_exit_2(pair, message, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from automation.cli import cli

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["preview", "--offline", "-f", str(ROOT / "local-fleet"), "--chart-source", pair])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1].startswith(f"error: {message}")
