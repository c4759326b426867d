"""Modelplane v0.5's InferenceGateway `tls.certificateRefs` (shared/reference/modelplane-v0.5.md §2.1): Secrets of
type `kubernetes.io/tls` in modelplane-system, which Modelplane copies to the gateway's cluster. Here: from the
fleet's Secret manifests, by the gateway stack, as the caller Secrets; a reference the fleet does not give is
refused before any stack runs, naming the file, the object and the field."""

from __future__ import annotations

import json
import re

import pytest

from tests.manifests import cluster, gpu_class, run


def tls_gateway(*names: str) -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "public"},
            "spec": {"clusterName": "c1", "tls": {"certificateRefs": [{"name": n} for n in names]}}}


def tls_secret(name: str, keys=("tls.crt", "tls.key"), namespace: str = "modelplane-system") -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {k: f"pem-of-{name}-{k}" for k in keys}}


@pytest.mark.parametrize("secrets,copied,refused", [
    ([tls_secret("eu")], ["eu"], None),
    ([], [], ("spec.tls.certificateRefs[0].name",
              "Secret modelplane-system/eu is not among the fleet's Secret manifests: give it with -f (a v1/Secret of "
              "type kubernetes.io/tls with tls.crt and tls.key), for the gateway stack to copy to the gateway's "
              "cluster c1")),
    # another namespace's Secret is not the gateway's
    ([tls_secret("eu", namespace="ml-team")], [], ("spec.tls.certificateRefs[0].name", "is not among")),
    ([tls_secret("eu", keys=("tls.crt",))], ["eu"], ("spec.tls.certificateRefs[0].name",
                                                     "Secret modelplane-system/eu has no tls.key")),
])
def test_certificate_refs_are_copied_from_the_fleets_secrets_or_refused(secrets, copied, refused):
    from components.args import gateway_args
    from workloads.render import v05_gateway_problems

    loaded = run(gpu_class(), cluster("c1"), tls_gateway("eu"), *secrets)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    args = gateway_args(loaded.fleet, "c1")
    assert args is not None
    copies = [o for o in args.front_door if o["kind"] == "Secret"]
    assert [o["metadata"]["name"] for o in copies] == copied
    for copy in copies:  # a placeholder the gateway stack's program fills: no value in any argument
        assert copy["type"] == "kubernetes.io/tls" and copy["metadata"]["namespace"] == "modelplane-system"
        assert copy["metadata"]["annotations"]["modelplane.ai/secret-source"] == "modelplane-system/eu"
        assert sorted(copy["stringData"]) == sorted(secrets[0]["stringData"])
    assert "pem-of-" not in json.dumps(args.model_dump())
    problems = v05_gateway_problems(loaded.fleet)
    if refused is None:
        assert problems == []
    else:
        [p] = problems
        assert (p.object, p.path) == ("InferenceGateway/public", refused[0]) and p.line > 0 and not p.warning
        assert refused[1] in p.message


def test_up_copies_the_certificate_to_the_gateways_cluster_and_refuses_one_not_given(tmp_path, monkeypatch, capsys):
    from automation.cli import main
    from tests import pulumi_double
    from tests.test_lifecycle import make_driver

    driver = make_driver(tmp_path, monkeypatch)
    gw = tls_gateway("eu")
    gw["spec"]["clusterName"] = "byo-eu"
    driver.docs = [gw if d["kind"] == "InferenceGateway" else d for d in driver.docs]
    without = list(driver.docs)
    driver.docs += [tls_secret("eu")]
    assert driver.up() == 0, capsys.readouterr().err
    gateway = pulumi_double.resources(driver.work / ".modelplane" / "backend", "modelplane", "gateway")
    [copy] = [r["inputs"] for r in gateway if r["type"] == "kubernetes:core/v1:Secret"]
    assert (copy["metadata"]["name"], copy["metadata"]["namespace"], copy["type"]) == (
        "eu", "modelplane-system", "kubernetes.io/tls")
    assert "pem-of-eu-tls.key" in json.dumps(copy["stringData"])  # the value, applied as a Pulumi secret
    for call in driver.calls():
        assert not any("pem-of-" in arg for arg in call["argv"]), call
    capsys.readouterr()
    driver.docs = without
    assert driver.up() != 0
    err = capsys.readouterr().err
    assert re.search(r"fleet\.yaml:\d+: InferenceGateway/public: spec\.tls\.certificateRefs\[0\]\.name: Secret "
                     r"modelplane-system/eu is not among the fleet's Secret manifests", err), err
    assert "Traceback" not in err and driver.ran("up") == []
    assert main(["render", "-f", driver.fleet(), "--out", "-"]) != 0
    assert "modelplane-system/eu is not among" in capsys.readouterr().err
