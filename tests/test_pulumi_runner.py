"""The real automation-API wrapper, checked without running an engine.

A fake PulumiCommand records every CLI call the automation API would make, so the workspace,
project settings, stack config and secrets can be checked; nothing here deploys anything.
"""

import json
import pathlib

import pytest
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult
from pulumi.automation.errors import create_command_error

from automation.execution.prerequisites import check_passphrase
from automation.execution.pulumi_runner import PulumiRunner
from automation.execution.runner import CLIMissing
from automation.planning.stacks import desired_state
from fleet.scheduler import schedule
from tests.manifests import run as load, example_documents

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = example_documents()  # examples/, less its v0.3.1 variant (tests/manifests.py)


CLUSTER_URN = ("urn:pulumi:platform-gke-us-central::modelplane::modelplane:gke:InferenceCluster$gcp:container/cluster:"
               "Cluster::gke-us-central")
HISTORY = ('[{"kind": "update", "startTime": "2026-11-30T00:00:00.000Z", "message": "", "environment": {}, '
           '"config": {}, "result": "succeeded", "endTime": "2026-11-30T00:00:01.000Z", "resourceChanges": {"same": 1}}]')


class FakeCommand(auto.PulumiCommand):
    def __init__(self, fail_with: str | None = None):  # no CLI is looked for
        self.command = "pulumi"
        self.version = auto.PulumiCommand.__init__.__globals__["VersionInfo"].parse("3.272.0")
        self.calls: list[tuple[list[str], str, dict]] = []
        self.fail_with = fail_with

    def run(self, args, cwd, additional_env, on_output=None, on_error=None):
        self.calls.append((list(args), cwd, dict(additional_env)))
        if args[:1] == ["up"] and self.fail_with:  # like the real one: a failed command raises
            raise create_command_error(CommandResult("", self.fail_with, 255))
        if args[:2] == ["stack", "output"]:
            return CommandResult("{}", "", 0)
        if args[:2] == ["stack", "history"]:  # what the automation API reads after an update
            return CommandResult(HISTORY, "", 0)
        if args[:1] == ["whoami"]:
            return CommandResult('{"user": "offline", "url": "file://x"}', "", 0)
        return CommandResult("", "", 0)


@pytest.fixture
def specs():
    fleet = load(*EXAMPLES).fleet
    schedule(fleet)
    return fleet, desired_state(fleet).specs


def test_workspace_project_and_backend(tmp_path, specs, monkeypatch):
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "correct horse")
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    fleet, desired = specs
    runner = PulumiRunner(tmp_path, fleet, pulumi_command=FakeCommand())
    options = runner.workspace_options(desired["platform-gke-us-central"])
    assert options.work_dir == str(tmp_path / "stacks" / "platform-gke-us-central")
    assert options.project_settings.name == "modelplane" and options.project_settings.runtime == "python"
    assert options.project_settings.backend.url == f"file://{(tmp_path / 'backend').resolve()}"
    assert options.secrets_provider == "passphrase"
    assert options.env_vars["PULUMI_CONFIG_PASSPHRASE"] == "correct horse"
    assert runner.workspace_options(desired["model-ml-team.qwen3-8b"]).project_settings.name == "modelplane-workloads"
    assert PulumiRunner(tmp_path, fleet, backend="s3://bucket/fleet", pulumi_command=FakeCommand()).workspace_options(
        desired["gateway"]).project_settings.backend.url == "s3://bucket/fleet"


def test_stack_selection_and_config(tmp_path, specs, monkeypatch):
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "pw")
    monkeypatch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", "hf_abc")
    fleet, desired = specs
    command = FakeCommand()
    runner = PulumiRunner(tmp_path, fleet, pulumi_command=command)
    runner.stack(desired["platform-eks-us-west"])
    argv = [c[0] for c in command.calls]
    assert ["stack", "select", "--create", "--stack", "platform-eks-us-west"] in argv or any(
        a[:2] == ["stack", "select"] and "platform-eks-us-west" in a for a in argv)
    config = next(a for a in argv if a[:2] == ["config", "set-all"])
    assert "modelplane:cluster=platform-eks-us-west".replace("platform-", "") in config
    assert "modelplane:gateway=false" in config
    runner.stack(desired["cache-ml-team.qwen3-coder"])
    # the token reaches the inline program in memory: never on a command line (argv is visible to every local user)
    assert not any("hf_abc" in arg for c in command.calls for arg in c[0])
    assert not any("--secret" in c[0] for c in command.calls)
    assert all(c[2].get("PULUMI_CONFIG_PASSPHRASE") == "pw" for c in command.calls)


def test_locked_stack_is_a_clear_failure_not_a_crash(tmp_path, specs, monkeypatch):
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "pw")
    fleet, desired = specs
    locked = FakeCommand(fail_with="error: the stack is currently locked by 1 lock(s). Either wait or run pulumi cancel.")
    result = PulumiRunner(tmp_path, fleet, pulumi_command=locked).run("up", desired["platform-byo-eu"], lambda e: None)
    assert result.ok is False and "locked by another update" in result.error and "pulumi cancel" in result.error


def test_missing_cli_and_passphrase_are_one_line_errors(tmp_path, specs, monkeypatch):
    fleet, _ = specs
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PULUMI_HOME", raising=False)
    with pytest.raises(CLIMissing, match="the Pulumi CLI is not installed: install it"):
        PulumiRunner(tmp_path, fleet)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    with pytest.raises(CLIMissing, match="PULUMI_CONFIG_PASSPHRASE"):
        check_passphrase("file:///tmp/x")


def test_cli_commands_without_the_pulumi_cli(tmp_path, monkeypatch, capsys):
    from automation.cli import main
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PULUMI_HOME", raising=False)
    for command in ("preview", "up", "destroy"):
        code = main([command, "-f", str(ROOT / "examples")])
        _, err = capsys.readouterr()
        if command == "destroy":
            assert code == 0 or "nothing to destroy" in err  # nothing applied here: nothing to do, no CLI needed
        else:
            lines = err.strip().splitlines()
            assert code == 2 and lines[0].startswith(f"error: `{command}` needs")
            assert "  - the Pulumi CLI is not installed" in [line.split(":")[0] for line in lines]
    assert main(["status", "-f", str(ROOT / "examples")]) == 0
    assert main(["plan", "-f", str(ROOT / "examples"), "-o", "json"]) == 0
    assert main(["render", "-f", str(ROOT / "examples"), "--out", str(tmp_path / "r")]) == 0
    assert not (tmp_path / ".modelplane" / "state.json").exists()  # nothing was recorded


@pytest.mark.parametrize("script, said", [
    ("echo 'error: could not load plugin cache' >&2; exit 1", "`pulumi version` failed (exit code 1) for the Pulumi CLI at"),
    ("echo v3.0.9", "the Pulumi CLI cannot be used: Minimum version requirement failed"),
])
def test_a_pulumi_cli_that_fails_or_is_too_old_is_one_line_not_an_internal_error(tmp_path, monkeypatch, capsys,
                                                                                 script, said):
    from automation.cli import main

    cli = tmp_path / "bin" / "pulumi"
    cli.parent.mkdir()
    cli.write_text(f"#!/bin/sh\n{script}\n")
    cli.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{cli.parent}:/usr/bin:/bin")
    monkeypatch.delenv("PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK", raising=False)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "correct horse battery staple")
    # every credential given: what is left to say is the CLI's problem (credentials are checked first)
    monkeypatch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", "hf_test")
    kubeconfig = tmp_path / "byo-eu.yaml"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    assert main(["up", "-f", str(ROOT / "examples"), "--kubeconfig", f"byo-eu={kubeconfig}"]) == 2
    err = capsys.readouterr().err
    assert said in err and "internal error" not in err and "Traceback" not in err


def test_pulumi_cloud_backends_need_no_passphrase(tmp_path, specs, monkeypatch):
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    fleet, desired = specs
    for url in ("https://api.pulumi.com", "https://pulumi.example.internal"):
        check_passphrase(url)  # the service encrypts secrets
        options = PulumiRunner(tmp_path, fleet, backend=url, pulumi_command=FakeCommand()).workspace_options(desired["gateway"])
        assert options.secrets_provider is None and options.project_settings.backend.url == url
    for url in ("s3://bucket/fleet", "gs://bucket", "azblob://container", "file:///tmp/x"):
        with pytest.raises(CLIMissing, match="PULUMI_CONFIG_PASSPHRASE"):
            check_passphrase(url)


def test_existing_cluster_kubeconfig_reaches_the_program_as_a_path_never_on_argv(tmp_path, specs, monkeypatch):
    from automation.execution.prerequisites import existing_kubeconfigs, missing_kubeconfigs

    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "pw")
    fleet, desired = specs
    secret = "apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: s3cr3t-token}}]\n"
    path = tmp_path / "byo.yaml"
    path.write_text(secret)
    assert missing_kubeconfigs(fleet, {}, ["platform-byo-eu"], tmp_path) == [
        "InferenceCluster/byo-eu is Existing: give its kubeconfig with --kubeconfig byo-eu=PATH, "
        f"$MODELPLANE_KUBECONFIG_BYO_EU=PATH, the file {tmp_path}/kubeconfigs/byo-eu-kubeconfig, the Secret: a "
        "v1/Secret modelplane-system/byo-eu-kubeconfig with key 'kubeconfig' given with -f, or "
        "$MODELPLANE_SECRET_MODELPLANE_SYSTEM__BYO_EU_KUBECONFIG__KUBECONFIG, or start a local fleet for it: "
        "`modelplane local up` (docs/local-fleet.md)"]
    monkeypatch.setenv("MODELPLANE_SECRET_MODELPLANE_SYSTEM__BYO_EU_KUBECONFIG__KUBECONFIG", secret)
    assert missing_kubeconfigs(fleet, {}, ["platform-byo-eu"], tmp_path) == []  # the Secret store has it
    monkeypatch.delenv("MODELPLANE_SECRET_MODELPLANE_SYSTEM__BYO_EU_KUBECONFIG__KUBECONFIG")
    monkeypatch.setenv("MODELPLANE_KUBECONFIG_BYO_EU", str(path))
    found = existing_kubeconfigs(fleet, {}, tmp_path)
    assert found == {"byo-eu": str(path.resolve())} and missing_kubeconfigs(fleet, found, ["platform-byo-eu"], tmp_path) == []
    monkeypatch.delenv("MODELPLANE_KUBECONFIG_BYO_EU")
    (tmp_path / "kubeconfigs").mkdir()
    (tmp_path / "kubeconfigs" / "byo-eu-kubeconfig").write_text(secret)  # named after existing.secretRef.name
    assert existing_kubeconfigs(fleet, {}, tmp_path) == {"byo-eu": str((tmp_path / "kubeconfigs" / "byo-eu-kubeconfig").resolve())}
    command = FakeCommand()
    runner = PulumiRunner(tmp_path, fleet, pulumi_command=command, kubeconfigs={"byo-eu": str(path)})
    runner.stack(desired["platform-byo-eu"])
    config = next(c[0] for c in command.calls if c[0][:2] == ["config", "set-all"])
    assert f"modelplane:kubeconfigFile={path}" in config
    assert not any("s3cr3t-token" in arg for c in command.calls for arg in c[0])


def test_destroying_a_platform_stack_lifts_protection_only_when_asked(tmp_path, specs, monkeypatch):
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "pw")
    fleet, desired = specs

    class Protected(FakeCommand):
        def run(self, args, cwd, additional_env, on_output=None, on_error=None):
            if args[:1] == ["destroy"] and not any(a[:2] == ["config", "set"] and "modelplane:deletionProtection" in a
                                                   for a, _, _ in self.calls):
                self.calls.append((list(args), cwd, dict(additional_env)))
                raise create_command_error(CommandResult("", "error: resource urn:pulumi:...::gke-us-central cannot be "
                                                             "deleted because it is protected", 255))
            if args[:1] in (["destroy"], ["up"]):
                self.calls.append((list(args), cwd, dict(additional_env)))
                return CommandResult("", "", 0)
            if args[:2] == ["stack", "export"]:  # the cluster, with GKE's own deletion protection on
                self.calls.append((list(args), cwd, dict(additional_env)))
                return CommandResult(json.dumps({"version": 3, "deployment": {"resources": [
                    {"urn": CLUSTER_URN, "inputs": {"deletionProtection": True}},
                    {"urn": "urn:pulumi:platform-gke-us-central::modelplane::kubernetes:helm.sh/v3:Release::keda",
                     "inputs": {}}]}}), "", 0)
            return super().run(args, cwd, additional_env, on_output, on_error)

    refused = PulumiRunner(tmp_path, fleet, pulumi_command=Protected()).run("destroy", desired["platform-gke-us-central"],
                                                                         lambda e: None)
    assert refused.ok is False and "modelplane destroy --unprotect" in refused.error
    command = Protected()
    runner = PulumiRunner(tmp_path / "b", fleet, pulumi_command=command, unprotect=True)
    result = runner.run("destroy", desired["platform-gke-us-central"], lambda e: None)
    assert result.ok, result.error
    verbs = [c[0][0] if c[0][0] not in ("config", "state") else " ".join(c[0][:2]) for c in command.calls]
    unprotect = next(i for i, c in enumerate(command.calls) if "modelplane:deletionProtection" in c[0])
    assert "false" in " ".join(command.calls[unprotect][0])
    assert verbs.index("state unprotect") < verbs.index("up") < verbs.index("destroy") and unprotect < verbs.index("up")
    up = command.calls[verbs.index("up")][0]
    assert [up[i + 1] for i, a in enumerate(up) if a == "--target"] == [CLUSTER_URN]  # the cluster alone


def test_a_stack_interrupted_between_its_commands_starts_no_more_of_them(tmp_path, specs, monkeypatch):
    """Ctrl-C can fall after a stack's `stack select` and `config set-all` and before its `up`: no `pulumi` process
    of it starts after that (with the CLI double at the process boundary), but the reads the SDK makes after an
    update."""
    from tests import pulumi_double

    work = pulumi_double.on_path(tmp_path, monkeypatch, "pw")
    fleet, desired = specs
    spec = desired["platform-gke-us-central"]
    runner = PulumiRunner(work / ".modelplane", fleet)
    stack = runner.stack(spec)  # the workspace is selected and configured
    before = len(pulumi_double.calls(tmp_path / "double"))
    runner.cancel(spec.name)  # no process of it runs now
    result = runner.run("up", spec, lambda event: None)
    assert not result.ok and "interrupted: `pulumi up" in (result.error or "")
    assert pulumi_double.calls(tmp_path / "double")[before:] == []
    stack.outputs()  # what the SDK reads after an update still runs
    assert [c["argv"][1:3] for c in pulumi_double.calls(tmp_path / "double")[before:]] == [["stack", "output"]] * 2


B_PROVIDER = {"urn": "urn:pulumi:platform-byo-eu::modelplane::pulumi:providers:kubernetes::byo-eu-k8s",
              "type": "pulumi:providers:kubernetes", "custom": True, "inputs": {"clusterIdentifier": "byo-eu"}}
B_RELEASE = {"urn": "urn:pulumi:platform-byo-eu::modelplane::kubernetes:helm.sh/v3:Release::byo-eu-keda",
             "type": "kubernetes:helm.sh/v3:Release", "custom": True, "inputs": {}}
GONE = ("error: can't delete Helm Release with unreachable cluster. Reason: \"unable to load schema information from "
        "the API server: Get \\\"https://127.0.0.1:1/api\\\": dial tcp 127.0.0.1:1: connect: connection refused\"")


class Unreachable(FakeCommand):
    """A backend whose stack holds objects of a cluster that does not answer: its destroy fails as the provider's."""

    def __init__(self, resources: list[dict]):
        super().__init__()
        self.resources = resources

    def run(self, args, cwd, additional_env, on_output=None, on_error=None):
        if args[:1] == ["destroy"]:
            self.calls.append((list(args), cwd, dict(additional_env)))
            raise create_command_error(CommandResult("", GONE, 255))
        if args[:2] == ["stack", "export"]:
            self.calls.append((list(args), cwd, dict(additional_env)))
            return CommandResult(json.dumps({"version": 3, "deployment": {"resources": self.resources}}), "", 0)
        return super().run(args, cwd, additional_env, on_output, on_error)


def test_a_stack_on_a_cluster_that_does_not_answer_fails_saying_so_and_is_never_dropped_unasked(tmp_path, specs,
                                                                                                 monkeypatch):
    from automation.planning.stacks import StackSpec
    from fleet.stack_id import StackId

    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "pw")
    fleet, _ = specs
    command = Unreachable([B_PROVIDER, B_RELEASE])
    spec = StackSpec.for_deletion(StackId.parse("platform-byo-eu"))
    result = PulumiRunner(tmp_path, fleet, pulumi_command=command).run("destroy", spec, lambda e: None)
    assert not result.ok and result.unreachable and "does not answer" in (result.error or "")
    assert not any(c[0][:2] == ["stack", "rm"] for c in command.calls)
    assert all("PULUMI_K8S_DELETE_UNREACHABLE" not in c[2] for c in command.calls)
    # a forgotten cluster, but not this stack's: the same
    other = Unreachable([B_PROVIDER, B_RELEASE])
    result = PulumiRunner(tmp_path, fleet, pulumi_command=other, forget=frozenset({"eks-us-west"})).run(
        "destroy", spec, lambda e: None)
    assert not result.ok and not any(c[0][:2] == ["stack", "rm"] for c in other.calls)


def test_a_forgotten_cluster_s_stack_leaves_the_backend_with_what_the_provider_cannot_drop(tmp_path, specs,
                                                                                           monkeypatch):
    from automation.planning.stacks import StackSpec
    from fleet.stack_id import StackId

    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "pw")
    fleet, _ = specs
    command = Unreachable([B_PROVIDER, B_RELEASE])
    spec = StackSpec.for_deletion(StackId.parse("platform-byo-eu"))
    runner = PulumiRunner(tmp_path, fleet, pulumi_command=command, forget=frozenset({"byo-eu"}))
    result = runner.run("destroy", spec, lambda e: None)
    assert result.ok, result.error
    destroy = next(c for c in command.calls if c[0][:1] == ["destroy"])
    assert destroy[2]["PULUMI_K8S_DELETE_UNREACHABLE"] == "true"  # the provider drops what it can
    removed = [c[0] for c in command.calls if c[0][:2] == ["stack", "rm"]]
    assert removed and "--force" in removed[0] and "platform-byo-eu" in removed[0]
    # a stack that also holds something outside the cluster (a cloud cluster) is never removed: it says how to go on
    cloud = {"urn": CLUSTER_URN, "type": "gcp:container/cluster:Cluster", "custom": True, "inputs": {}}
    held = Unreachable([B_PROVIDER, B_RELEASE, cloud])
    result = PulumiRunner(tmp_path, fleet, pulumi_command=held, forget=frozenset({"byo-eu"})).run(
        "destroy", spec, lambda e: None)
    assert not result.ok and "pulumi state delete" in (result.error or "") and B_RELEASE["urn"] in result.error
    assert not any(c[0][:2] == ["stack", "rm"] for c in held.calls)


# what the real CLI 3.277 printed for an update the API server refused (a ValidatingAdmissionPolicy), trimmed
REFUSED = """
 code: 1
 stdout: Updating (model-ml-team.llama-70b):

 ~  kubernetes:apps/v1:Deployment model-ml-team.llama-70b-local-b:ml-team/llama-70b-vllm updating (0s) [diff: ~spec]; error: 1 error occurred:
 ~  kubernetes:apps/v1:Deployment model-ml-team.llama-70b-local-b:ml-team/llama-70b-vllm **updating failed** [diff: ~spec]; error: 1 error occurred:
    pulumi:pulumi:Stack modelplane-workloads-model-ml-team.llama-70b running error: update failed
Diagnostics:
  kubernetes:apps/v1:Deployment (model-ml-team.llama-70b-local-b:ml-team/llama-70b-vllm):
    error: 1 error occurred:
    \t* the Kubernetes API server reported that "ml-team/llama-70b-vllm" failed to fully initialize or become live: deployments.apps "llama-70b-vllm" is forbidden: ValidatingAdmissionPolicy 'freeze-llama' with binding 'freeze-llama' denied request: llama-70b is frozen on this cluster

  pulumi:pulumi:Stack (modelplane-workloads-model-ml-team.llama-70b):
    error: update failed
"""


def test_a_failure_the_cli_lists_as_several_errors_is_reported_by_what_they_say():
    """"error: 1 error occurred:" said nothing of why: the run's summary now names what the API server refused."""
    from automation.execution.runner import first_error

    error = first_error(create_command_error(CommandResult(REFUSED.split(" stdout: ")[1], "", 1)))
    assert error.startswith("error: the Kubernetes API server reported that \"ml-team/llama-70b-vllm\"")
    assert "ValidatingAdmissionPolicy 'freeze-llama'" in error and "occurred" not in error
    plain = create_command_error(CommandResult("", "error: update failed\nerror: later", 1))
    assert first_error(plain) == "error: update failed"


def test_only_locks_of_this_machine_whose_process_is_gone_are_released(tmp_path):
    import datetime
    import os
    import socket
    import subprocess

    from automation.execution.stale_locks import locks_named, release_stale, running

    ended = subprocess.Popen(["true"])
    ended.wait()
    now = datetime.datetime.now(datetime.timezone.utc)
    assert running(os.getpid(), now) and not running(ended.pid, now)
    assert not running(os.getpid(), now - datetime.timedelta(days=1))  # a later process took the lock's pid
    folder = tmp_path / "backend" / ".pulumi" / "locks" / "organization" / "p" / "s"
    folder.mkdir(parents=True)
    here = socket.gethostname()

    def refused(*locks: tuple[str, str, int]) -> str:
        lines = []
        for name, host, pid in locks:
            (folder / name).write_text("{}")
            lines.append(f"  file://{folder / name}: created by root@{host} (pid {pid}) at {now.isoformat()}")
        return "error: the stack is currently locked by 1 lock(s). Either wait or `pulumi cancel`.\n" + "\n".join(lines)

    backend = f"file://{tmp_path / 'backend'}"
    text = refused(("a.json", here, ended.pid))
    assert [(lock.host, lock.pid) for lock in locks_named(text)] == [(here, ended.pid)]
    assert release_stale(text, backend) == [folder / "a.json"] and not (folder / "a.json").exists()
    # one live holder, another machine's lock, another backend, a path outside the backend's locks: all stay
    for text, other in ((refused(("b.json", here, ended.pid), ("c.json", here, os.getpid())), backend),
                        (refused(("d.json", "elsewhere", ended.pid)), backend),
                        (refused(("e.json", here, ended.pid)), "s3://bucket/fleet"),
                        (refused(("f.json", here, ended.pid)), f"file://{tmp_path / 'another'}")):
        assert release_stale(text, other) == []
    assert sorted(p.name for p in folder.iterdir()) == ["b.json", "c.json", "d.json", "e.json", "f.json"]
