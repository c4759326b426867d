"""Pulumi.yaml as the Pulumi CLI reads it: its typed config keys, the example stacks against them, and the docs.

`project_config` is a double of the CLI's own project validation and stack-config resolution, as strict as
the CLI (sdk/go/common/workspace/project.go): a key outside the project's namespace may carry only a value,
a typed default must have its type, a declared key without a default must be set by the stack, and a stack
value must have the declared type. The platform program then runs under the mocks with the resolved config,
and every key it reads must be declared, or be one of the few Pulumi cannot type.
"""

from __future__ import annotations

import json
import pathlib
import re

import pulumi
import pytest
import yaml

from automation.checks.offline import run

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROJECT = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
# Read by the program but not declared, each for a reason Pulumi.yaml's comment gives.
UNDECLARED = {"gateway", "versions", "chartSources", "kubeconfigFiles", "controlPlaneKubeconfig"}
SIMPLE_TYPES = {"string", "integer", "boolean", "array"}


class ProjectError(Exception):
    pass


def _has_type(type_name: str, value) -> bool:
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, str) and value.lstrip("-").isdigit())
    if type_name == "boolean":
        return isinstance(value, bool) or value in ("true", "false")
    return isinstance(value, list)


def _declarations(project: dict) -> dict[str, dict]:
    """Pulumi.yaml's config block, normalised: a plain value is `{value: ...}`; project keys get their prefix."""
    name = project["name"]
    declared = {}
    for key, entry in (project.get("config") or {}).items():
        entry = entry if isinstance(entry, dict) else {"value": entry}
        full = key if ":" in key else f"{name}:{key}"
        if "default" in entry and "value" in entry:
            raise ProjectError(f"project config '{key}' cannot have both a 'default' and 'value' attribute")
        if full.startswith(f"{name}:"):
            if "type" in entry and entry["type"] not in SIMPLE_TYPES:
                raise ProjectError(f"'{key}' has type {entry['type']!r}, which is not one of {sorted(SIMPLE_TYPES)}")
            if entry.get("type") == "array" and "items" not in entry:
                raise ProjectError(f"The configuration key '{key}' declares an array but does not specify 'items'")
            if "type" in entry and "default" in entry and not _has_type(entry["type"], entry["default"]):
                raise ProjectError(f"The default value specified for configuration key '{key}' is not of the "
                                   f"expected type '{entry['type']}'")
        else:
            if "type" in entry:
                raise ProjectError(f"Configuration key '{key}' is not namespaced by the project and should not "
                                   "define a type")
            if "default" in entry:
                raise ProjectError(f"Configuration key '{key}' is not namespaced by the project and should not "
                                   "define a default value")
            if "value" not in entry:
                raise ProjectError(f"Configuration key '{key}' is namespaced and must provide an attribute 'value'")
        declared[full] = entry
    return declared


def project_config(project: dict, stack: str, stack_config: dict) -> dict[str, str]:
    """The config the program sees: project values and defaults under the stack's own, as the CLI resolves it."""
    declared = _declarations(project)
    resolved = {key: entry["value"] for key, entry in declared.items() if "value" in entry}
    resolved.update(stack_config)
    for key, entry in declared.items():
        if "type" not in entry:
            continue
        if key not in resolved:
            if "default" not in entry:
                raise ProjectError(f"Stack '{stack}' is missing configuration value '{key.split(':', 1)[1]}'")
            resolved[key] = entry["default"]
        elif not _has_type(entry["type"], resolved[key]):
            raise ProjectError(f"Stack '{stack}' with configuration key '{key}' must be of type '{entry['type']}'")
    return {key: json.dumps(value) if isinstance(value, (bool, dict, list)) else str(value)
            for key, value in resolved.items()}


def stack_file(stack: str) -> dict:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def test_pulumi_yaml_is_a_valid_project_whose_modelplane_keys_are_its_own():
    declared = _declarations(PROJECT)
    assert PROJECT["name"] == "modelplane"  # else Pulumi refuses types on the `modelplane:` keys
    assert {key for key, entry in declared.items() if "type" in entry} == {
        f"modelplane:{key}" for key in ("fleet", "cluster", "gatewayOnly", "controlPlaneCluster", "controlPlaneStack",
                                        "deletionProtection", "kubeconfigFile", "kubeconfigContext", "clusterCredentials")}
    assert all(entry.get("description") for entry in declared.values())


@pytest.mark.parametrize("project,message", [
    ({"name": "p", "config": {"aws:region": {"type": "string", "value": "x"}}}, "should not define a type"),
    ({"name": "p", "config": {"aws:region": {"default": "x"}}}, "should not define a default"),
    ({"name": "p", "config": {"flag": {"type": "boolean", "default": "yes"}}}, "expected type 'boolean'"),
    ({"name": "p", "config": {"list": {"type": "array"}}}, "does not specify 'items'"),
    ({"name": "p", "config": {"o": {"type": "object"}}}, "not one of"),
    ({"name": "p", "config": {"k": {"type": "string", "default": "a", "value": "b"}}}, "both a 'default' and 'value'"),
])
def test_the_project_double_refuses_what_the_cli_refuses(project, message):
    with pytest.raises(ProjectError, match=message):
        _declarations(project)


def test_a_stack_without_a_fleet_or_with_a_mistyped_value_is_refused_before_the_program_runs():
    with pytest.raises(ProjectError, match="missing configuration value 'fleet'"):
        project_config(PROJECT, "s", {})
    with pytest.raises(ProjectError, match="deletionProtection' must be of type 'boolean'"):
        project_config(PROJECT, "s", {"modelplane:fleet": "f", "modelplane:deletionProtection": "no"})


@pytest.mark.parametrize("stack", ["gcp-dev", "aws-prod", "existing"])
def test_example_stacks_satisfy_the_declared_types_and_the_program_reads_only_known_keys(stack, monkeypatch):
    config = project_config(PROJECT, stack, stack_file(stack))
    secrets = {"modelplane:onprem-kubeconfig": "apiVersion: v1\nkind: Config\n"} if stack == "existing" else {}
    read: set[str] = set()
    original = pulumi.Config._get

    def recording(self, key, *args, **kwargs):
        read.add(self.full_key(key))
        return original(self, key, *args, **kwargs)

    monkeypatch.setattr(pulumi.Config, "_get", recording)
    monkeypatch.chdir(ROOT / "infra")
    from components.platform import main

    resources = run(main, "modelplane", stack, {**config, **secrets}, list(secrets), root_directory=str(ROOT))
    assert resources  # the program ran to the end with the defaults the CLI would apply
    ours = {key.split(":", 1)[1] for key in read if key.startswith("modelplane:")}
    secret_refs = {key.split(":", 1)[1] for key in secrets}
    declared = {key.split(":", 1)[1] for key in _declarations(PROJECT) if key.startswith("modelplane:")}
    assert ours - secret_refs <= declared | UNDECLARED
    assert "fleet" in ours and "deletionProtection" in ours


def test_the_platform_docs_table_lists_every_key_the_project_knows():
    text = (ROOT / "docs" / "platform.md").read_text()
    table = set(re.findall(r"^\| `modelplane:([A-Za-z]+)` \|", text, re.MULTILINE))
    declared = {key.split(":", 1)[1] for key in _declarations(PROJECT) if key.startswith("modelplane:")}
    assert table == declared | UNDECLARED
