"""The Pulumi CLI double itself: each thing the real CLI, engine or provider refuses is refused here too.

Driven through Pulumi's own automation API with tiny programs (a raw custom resource needs no
provider plugin), so each refusal is seen as the automation layer would see it from the real CLI.
"""

from __future__ import annotations

import json
import pathlib

import pulumi
import pytest
from pulumi import automation as auto

from tests import pulumi_double
from tests.pulumi_engine import Backend

PROJECT = "double-test"


class Thing(pulumi.CustomResource):
    def __init__(self, name: str, size: int = 1, opts: pulumi.ResourceOptions | None = None):
        super().__init__("test:index:Thing", name, {"size": size}, opts)


@pytest.fixture
def work(tmp_path, monkeypatch):
    folder = pulumi_double.on_path(tmp_path, monkeypatch, "double-passphrase")
    (folder / "backend").mkdir()
    return folder


def stack(work: pathlib.Path, program, backend: str | None = None, name: str = "dev"):
    url = backend or f"file://{work / 'backend'}"
    options = auto.LocalWorkspaceOptions(
        work_dir=str(work / "project"),
        project_settings=auto.ProjectSettings(name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=url)),
        secrets_provider="passphrase", env_vars={"PULUMI_BACKEND_URL": url})
    (work / "project").mkdir(exist_ok=True)
    return auto.create_or_select_stack(stack_name=name, project_name=PROJECT, program=program, opts=options)


def resources(work: pathlib.Path, name: str = "dev") -> dict[str, dict]:
    return {r["urn"].rsplit("::", 1)[-1]: r for r in pulumi_double.resources(work / "backend", PROJECT, name)}


def control(work: pathlib.Path, **settings) -> None:
    (work.parent / "double" / "control.json").write_text(json.dumps(settings))


def test_a_missing_backend_folder_is_refused_as_the_diy_backend_does(work):
    with pytest.raises(auto.errors.CommandError, match="unable to open bucket file://.*no such file or directory"):
        stack(work, lambda: None, backend=f"file://{work / 'nowhere'}")


def test_stack_names_follow_the_cli_rules(work):
    with pytest.raises(auto.errors.CommandError, match="may only contain alphanumeric"):
        stack(work, lambda: None, name="model ml.qwen!")


def test_a_program_runs_and_its_exports_and_secrets_are_the_stacks_outputs(work):
    def program():
        Thing("a", 2)
        pulumi.export("plain", "x")
        pulumi.export("token", pulumi.Output.secret("s3cr3t"))

    result = stack(work, program).up()
    assert result.summary.resource_changes == {"create": 2}  # the stack resource counts, as the engine counts it
    assert result.outputs["plain"].value == "x" and result.outputs["token"].secret
    assert resources(work)["a"]["inputs"] == {"size": 2}
    raw = (work / "backend" / ".pulumi" / "stacks" / PROJECT / "dev.json").read_text()
    assert "s3cr3t" not in raw  # a secret is ciphertext in the checkpoint
    again = stack(work, program).up()
    assert again.summary.resource_changes == {"same": 2}


def test_a_protected_resource_is_never_deleted_or_replaced(work):
    stack(work, lambda: Thing("keep", opts=pulumi.ResourceOptions(protect=True))).up()
    with pytest.raises(auto.errors.CommandError, match="resource .*::keep\" cannot be deleted\nbecause it is protected"):
        stack(work, lambda: None).up()
    assert "keep" in resources(work)
    control(work, replaceOn={"test:index:Thing": ["size"]})
    with pytest.raises(auto.errors.CommandError, match="unable to replace resource"):
        stack(work, lambda: Thing("keep", 5, opts=pulumi.ResourceOptions(protect=True))).up()
    with pytest.raises(auto.errors.CommandError, match="resource .*::keep\" cannot be deleted"):
        stack(work, lambda: None).destroy()
    stack(work, lambda: Thing("keep")).up()  # protection lifted by the program, then deleted
    assert stack(work, lambda: None).destroy().summary.resource_changes == {"delete": 2}


def test_retain_on_delete_leaves_the_object_and_says_so(work):
    stack(work, lambda: Thing("kept", opts=pulumi.ResourceOptions(retain_on_delete=True))).up()
    stack(work, lambda: None).up()
    assert "kept" not in resources(work)
    retained = (work.parent / "double" / "retained.jsonl").read_text()
    assert "test:index:Thing::kept" in retained


def test_a_failure_half_way_keeps_what_was_created(work):
    control(work, failOn={"dev": {"resource": "second", "error": "quota exceeded"}})

    def program():
        first = Thing("first")
        Thing("second", opts=pulumi.ResourceOptions(depends_on=[first]))

    with pytest.raises(auto.errors.CommandError, match="quota exceeded"):
        stack(work, program).up()
    assert "first" in resources(work) and "second" not in resources(work)


def test_a_program_that_raises_fails_the_update_and_deletes_nothing(work):
    stack(work, lambda: Thing("a")).up()

    def broken():
        raise pulumi.RunError("invalid fleet manifests")

    with pytest.raises(auto.errors.CommandError, match="invalid fleet manifests"):
        stack(work, broken).up()
    assert "a" in resources(work)


def test_one_update_per_stack_and_cancel_removes_the_lock(work):
    target = stack(work, lambda: Thing("a"))
    Backend(f"file://{work / 'backend'}").lock(PROJECT, "dev")  # another update holds it
    with pytest.raises(auto.errors.CommandError, match="currently locked by 1 lock"):
        target.up()
    target.cancel()
    assert target.up().summary.resource_changes == {"create": 2}


def test_the_passphrase_the_stack_was_created_with_is_needed(work, monkeypatch):
    target = stack(work, lambda: pulumi.export("token", pulumi.Output.secret("x")))
    target.up()
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "another")
    with pytest.raises(auto.errors.CommandError, match="incorrect passphrase"):
        target.outputs()


def test_a_stack_reference_reads_the_other_stacks_outputs_and_refuses_an_unknown_stack(work):
    stack(work, lambda: pulumi.export("address", "198.51.100.7"), name="platform").up()
    seen = []

    def reader():
        ref = pulumi.StackReference("ref", stack_name=f"organization/{PROJECT}/platform")
        pulumi.export("copied", ref.get_output("address"))
        ref.get_output("address").apply(seen.append)

    assert stack(work, reader, name="reader").up().outputs["copied"].value == "198.51.100.7"

    def unknown():
        pulumi.StackReference("ref", stack_name=f"organization/{PROJECT}/nope")

    with pytest.raises(auto.errors.CommandError, match="unknown stack"):
        stack(work, unknown, name="reader").up()


def test_a_local_program_runs_from_pulumi_yaml_with_its_declared_config_types(work):
    project = work / "local"
    (project / "prog").mkdir(parents=True)
    (project / "prog" / "__main__.py").write_text(
        "import pulumi\nconfig = pulumi.Config()\npulumi.export('flag', config.require_bool('flag'))\n")
    (project / "Pulumi.yaml").write_text(
        f"name: local-test\nruntime:\n  name: python\nmain: prog/\nbackend:\n  url: file://{work / 'backend'}\n"
        "config:\n  flag:\n    type: boolean\n  required:\n    type: string\n")
    target = auto.create_or_select_stack(stack_name="dev", work_dir=str(project))
    target.set_config("flag", auto.ConfigValue(value="true"))
    with pytest.raises(auto.errors.CommandError, match="missing configuration value 'local-test:required'"):
        target.up()
    target.set_config("required", auto.ConfigValue(value="x"))
    target.set_config("flag", auto.ConfigValue(value="yes"))
    with pytest.raises(auto.errors.CommandError, match="must be of type 'boolean'"):
        target.up()
    target.set_config("flag", auto.ConfigValue(value="true"))
    assert target.up().outputs["flag"].value is True
