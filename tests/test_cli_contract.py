"""The Pulumi CLI double (tests/pulumi_double.py), held to the real CLI: the same command sequences, driven
through the project's own PulumiRunner and PulumiRecord, must read the same through both.

The real CLI is the one `make toolchain` builds (automation/local/toolchain.py); without it these tests fail and
say so. Each scenario runs once per CLI, each with its own `file://` backend, PULUMI_HOME and passphrase in a tmp
folder, and inline programs that need no provider plugin (exports, secrets, ComponentResources), so nothing is
downloaded. What is compared is what the project reads (docs/automation.md, "The double and the real CLI"):
the RunResults and records it makes of the CLI's answers; the shapes of `stack ls --json`, `stack output
--json` (masked and shown), `stack history --json` and `stack export`; exit codes, the automation API's error
classes and the CLI's first `error:` line, with paths, ids and times blanked.
"""

from __future__ import annotations

import contextlib
import json
import os
import pprint
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pulumi
import pytest
from pulumi import automation as auto

from automation.execution import pulumi_runner
from automation.projects import LEGACY_PLATFORM_PROJECT, PLATFORM_PROJECT
from automation.execution.pulumi_command import interruptible_command
from automation.execution.pulumi_runner import PulumiRunner
from automation.execution.runner import AutomationError, first_error, started_cli
from automation.local.toolchain import find
from automation.planning.stacks import StackSpec
from automation.record.backend import PulumiRecord
from fleet.stack_id import StackId
from tests import pulumi_double

CLIS = ("double", "real")
PASSPHRASE = "contract-passphrase"
GATEWAY = StackSpec(StackId.gateway(), "fingerprint")


def real_cli() -> Path:
    """The folder of the real CLI `make toolchain` built: never skipped, a missing one fails the test."""
    pulumi_bin = find().folder / "pulumi"
    if not os.access(pulumi_bin, os.X_OK):
        pytest.fail(f"the real Pulumi CLI is not built ({pulumi_bin}): run `make toolchain` (the contract test "
                    "checks the CLI double against it)")
    return pulumi_bin.parent


class Cli:
    """One CLI under test, in its own folder: its state root, backend, and every call it answered."""

    def __init__(self, kind: str, folder: Path):
        self.kind = kind
        self.folder = folder
        self.root = folder / "state"
        self.backend = f"file://{folder / 'backend'}"
        self.calls: list[dict[str, Any]] = []
        self.programs: dict[str, Callable[[], None]] = {}

    def command(self):
        """The project's own PulumiCommand (as PulumiRunner makes it), recording each call's argv and outcome."""
        command = started_cli(lambda: interruptible_command(auto))
        run = command.run

        def recorded(args, cwd, additional_env, on_output=None, on_error=None):
            command = " ".join([a for a in args if a != "--non-interactive"][:2])  # the rest names ports and files
            try:
                result = run(args, cwd, additional_env, on_output, on_error)
            except auto.errors.CommandError as exc:
                self.calls.append({"command": command, "error": type(exc).__name__, "code": _code(exc)})
                raise
            self.calls.append({"command": command, "code": result.code})
            return result

        command.run = recorded
        return command

    def runner(self) -> PulumiRunner:
        return PulumiRunner(self.root, None, backend=self.backend, pulumi_command=self.command())  # type: ignore[arg-type]

    def record(self) -> PulumiRecord:
        return PulumiRecord(self.root, self.backend, command=self.command())

    def raw(self, runner: PulumiRunner, spec: StackSpec, *argv: str, project: str | None = None) -> dict[str, Any]:
        """One CLI command in the stack's workspace: exit code, stdout as JSON, the first error line and class."""
        options = runner.workspace_options(spec, project)
        workspace = auto.LocalWorkspace(work_dir=options.work_dir, project_settings=options.project_settings,
                                        env_vars=options.env_vars, pulumi_command=runner.command)  # its Pulumi.yaml
        try:
            result = runner.command.run(list(argv), workspace.work_dir, workspace.env_vars)
        except auto.errors.CommandError as exc:
            return {"code": _code(exc), "error": type(exc).__name__, "message": self.blank(first_error(exc))}
        return {"code": result.code, "json": json.loads(result.stdout) if result.stdout.strip() else None}

    def blank(self, text: str | None) -> str | None:
        """Paths, ids and times out of a message: what differs by run, not by CLI."""
        if text is None:
            return None
        text = text.replace(str(self.folder), "<tmp>")
        text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", text)
        return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", text)


def _code(exc: auto.errors.CommandError) -> int:
    found = re.search(r"code: (-?\d+)", str(exc))
    return int(found.group(1)) if found else -1


@contextlib.contextmanager
def using(kind: str, tmp_path: Path, monkeypatch) -> Iterator[Cli]:
    """The process's environment as the project runs a CLI in it: that CLI first on PATH, a file:// backend, the
    passphrase, no update check, no plugin downloads, a Pulumi home of its own. Restored afterwards."""
    cli = Cli(kind, tmp_path / kind)
    (cli.folder / "backend").mkdir(parents=True)
    (cli.folder / "home").mkdir()
    cli.root.mkdir()
    bin_dir = real_cli() if kind == "real" else pulumi_double.install(cli.folder / "double")
    saved = dict(os.environ)
    os.environ.update({"PATH": f"{bin_dir}{os.pathsep}{saved['PATH']}", "PULUMI_BACKEND_URL": cli.backend,
                       "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PULUMI_SKIP_UPDATE_CHECK": "true",
                       "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true", "PULUMI_HOME": str(cli.folder / "home"),
                       "PULUMI_DOUBLE_DIR": str(cli.folder / "double" / "double")})
    os.environ.pop("PULUMI_CONFIG_PASSPHRASE_FILE", None)
    monkeypatch.setattr(pulumi_runner, "program_for", lambda spec, *_: cli.programs.get(spec.name, lambda: None))
    try:
        yield cli
    finally:
        os.environ.clear()
        os.environ.update(saved)


def both(tmp_path: Path, monkeypatch, scenario: Callable[[Cli], dict]) -> dict:
    """The scenario through the double and through the real CLI; what the project read must be the same."""
    seen = {}
    for kind in CLIS:
        with using(kind, tmp_path, monkeypatch) as cli:
            seen[kind] = scenario(cli)
    differ = {key: {"double": seen["double"].get(key), "real": value} for key, value in seen["real"].items()
              if seen["double"].get(key) != value}
    assert not differ, "the double answers otherwise than the real CLI:\n" + pprint.pformat(differ, width=120)
    assert seen["double"] == seen["real"]
    return seen["real"]


# ---- programs: no provider, so the real CLI needs no plugin ------------------------------------------

class Box(pulumi.ComponentResource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("modelplane:contract:Box", name, {}, opts)
        pulumi.ComponentResource("modelplane:contract:Inner", f"{name}-inner", {},
                                 pulumi.ResourceOptions(parent=self))
        self.register_outputs({"size": 3})


def applied() -> None:
    Box("box")
    pulumi.export("plain", "hello")
    pulumi.export("count", 3)
    pulumi.export("nested", {"list": [1, "two"], "flag": True})
    pulumi.export("token", pulumi.Output.secret("s3cr3t"))


def protected() -> None:
    Box("vault", pulumi.ResourceOptions(protect=True))


def broken() -> None:
    Box("box")
    raise ValueError("the fleet's manifests are invalid")


# ---- what the project reads, normalized ------------------------------------------------------------

def shape(value: Any) -> Any:
    """Keys and types, not values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return sorted({repr(shape(v)) for v in value})
    return type(value).__name__


def run_result(cli: Cli, result) -> dict:
    return {"ok": result.ok, "changes": result.changes, "outputs": result.outputs, "error": cli.blank(result.error),
            "window": result.window is not None}


def history(entries: list[dict]) -> list[dict]:
    times = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$")  # whole seconds, as UpdateWindow expects
    return [{"keys": sorted(e), "kind": e["kind"], "result": e["result"], "changes": e.get("resourceChanges"),
             "types": shape({k: v for k, v in e.items() if k not in ("environment", "config")}),
             "times": all(times.match(e[k]) for k in ("startTime", "endTime"))} for e in entries]


def export(document: dict) -> dict:
    deployment = document["deployment"]
    return {"keys": sorted(document), "deployment": sorted(deployment), "manifest": sorted(deployment["manifest"]),
            "resources": [{k: r.get(k) for k in ("urn", "type", "custom", "parent")} | {"outputs": _secrets(r.get("outputs"))}
                          for r in deployment["resources"]]}


def _secrets(value: Any) -> Any:
    """Outputs with each secret as its form (ciphertext, or plaintext JSON text) and its revealed value."""
    if isinstance(value, dict) and value.get(pulumi_double.SECRET_SIG) == pulumi_double.SECRET_VALUE:
        if "plaintext" in value:
            return {"secret": "plaintext", "value": json.loads(value["plaintext"])}
        return {"secret": sorted(value), "ciphertext": isinstance(value.get("ciphertext"), str)}
    if isinstance(value, dict):
        return {k: _secrets(v) for k, v in value.items()}
    return value


def verbs(cli: Cli) -> list[str]:
    return [c["command"] for c in cli.calls]


# ---- the scenarios --------------------------------------------------------------------------------

def test_an_applied_stack_reads_the_same_through_the_double_and_the_real_cli(tmp_path, monkeypatch):
    def scenario(cli: Cli) -> dict:
        cli.programs["gateway"] = applied
        runner = cli.runner()
        first = runner.run("up", GATEWAY, lambda e: None)
        again = runner.run("up", GATEWAY, lambda e: None)
        preview = runner.run("preview", GATEWAY, lambda e: None)
        # the record this machine just applied is read back from the backend without reading the stack's outputs
        record = cli.record()
        record.applied("gateway", again.outputs, again.window)
        del cli.calls[:]
        read = record.read()
        record_calls = verbs(cli)
        raw = {argv: cli.raw(runner, GATEWAY, *argv.split()) for argv in (
            "stack ls --json", "stack output --json --stack gateway",
            "stack output --json --show-secrets --stack gateway", "stack history --json --stack gateway",
            "stack export --stack gateway", "stack export --show-secrets --stack gateway")}
        gone = runner.run("destroy", GATEWAY, lambda e: None)
        after = cli.raw(runner, GATEWAY, "stack", "history", "--json", "--stack", "gateway")
        listed = raw["stack ls --json"]["json"]
        return {
            "up": run_result(cli, first), "up again": run_result(cli, again), "preview": run_result(cli, preview),
            "destroy": run_result(cli, gone),
            "record": {name: (dict(s.outputs), s.applied_at is not None) for name, s in read.stacks.items()},
            "record calls": record_calls,
            "stack ls": [{"keys": sorted(e), "name": e["name"], "current": e["current"],
                          "resourceCount": e.get("resourceCount"),
                          "lastUpdate": bool(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", e["lastUpdate"]))}
                         for e in listed],
            "stack output": raw["stack output --json --stack gateway"],
            "stack output --show-secrets": raw["stack output --json --show-secrets --stack gateway"],
            "stack history": history(raw["stack history --json --stack gateway"]["json"]),
            "history after destroy": after,  # the destroyed stack is removed from the backend: no stack named it
            "stack export": export(raw["stack export --stack gateway"]["json"]),
            "stack export --show-secrets": export(raw["stack export --show-secrets --stack gateway"]["json"]),
        }

    seen = both(tmp_path, monkeypatch, scenario)
    # and what they agree on is what the project needs
    assert seen["up"]["changes"] == {"create": 3} and seen["up again"]["changes"] == {"same": 3}
    assert seen["up"]["window"] and seen["up"]["outputs"]["nested"] == {"list": [1, "two"], "flag": True}
    assert "token" not in seen["up"]["outputs"] and seen["destroy"]["changes"] == {"delete": 3}
    assert seen["record"] == {"gateway": ({"plain": "hello", "count": 3, "nested": {"list": [1, "two"], "flag": True}},
                                          True)}
    assert "stack output" not in seen["record calls"]  # its own update: the outputs it returned are the record
    assert seen["stack output"]["json"]["token"] == "[secret]"
    assert seen["stack output --show-secrets"]["json"]["token"] == "s3cr3t"
    # a destroyed stack leaves the backend (the runner removes it): asking for it is the CLI's "no such stack"
    assert seen["history after destroy"]["code"] == 6 and "no stack named" in seen["history after destroy"]["message"]


def test_each_refusal_the_project_reads_is_said_alike(tmp_path, monkeypatch):
    def scenario(cli: Cli) -> dict:
        cli.programs.update({"gateway": applied, "platform-vault": protected, "platform-broken": broken})
        runner = cli.runner()
        out: dict[str, Any] = {}
        runner.run("up", GATEWAY, lambda e: None)
        # a second update while another holds the stack's lock
        started, gate = cli.folder / "started", cli.folder / "gate"

        def holding() -> None:
            started.touch()
            while not gate.exists():
                time.sleep(0.05)
            applied()

        holder = auto.select_stack(stack_name="gateway", project_name=PLATFORM_PROJECT, program=holding,
                                   opts=runner.workspace_options(GATEWAY))
        thread = threading.Thread(target=holder.up, kwargs={"color": "never"})
        thread.start()
        try:
            deadline = time.monotonic() + 120
            while not started.exists() and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert started.exists(), "the holding update never ran its program"
            out["locked"] = run_result(cli, runner.run("up", GATEWAY, lambda e: None))
            out["locked raw"] = cli.calls[-1]
        finally:
            gate.touch()
            thread.join()
        # a stack that does not exist; a name that is taken; a stack made twice; a name the CLI refuses
        vault, other = StackId.platform("vault"), StackId.platform("other")
        runner.stack(StackSpec(other, ""))
        for key, old, new in (("rename missing", StackId.platform("gone"), StackId.platform("went")),
                              ("rename onto existing", GATEWAY.id, other)):
            with pytest.raises(AutomationError) as refused:
                runner.rename(old, new)
            out[key] = [cli.blank(str(refused.value)), cli.calls[-1]]
        out["select missing"] = cli.raw(runner, GATEWAY, "stack", "select", "--stack", "gone")
        out["init existing"] = cli.raw(runner, GATEWAY, "stack", "init", "gateway")
        out["bad name"] = cli.raw(runner, GATEWAY, "stack", "select", "--create", "--stack", "bad name")
        # a destroy that stops at a protected resource; a program that raises
        out["protected up"] = run_result(cli, runner.run("up", StackSpec(vault, ""), lambda e: None))
        out["protected destroy"] = run_result(cli, runner.run("destroy", StackSpec(vault, ""), lambda e: None))
        out["protected raw"] = cli.calls[-1]
        out["program raises"] = run_result(cli, runner.run("up", StackSpec(StackId.platform("broken"), ""),
                                                           lambda e: None))
        out["program raises raw"] = cli.calls[-1]
        # the wrong passphrase: masked outputs (the record) still read, secrets and operations refused
        os.environ["PULUMI_CONFIG_PASSPHRASE"] = "not-the-passphrase"
        wrong = cli.runner()
        out["wrong passphrase: record"] = {n: dict(s.outputs) for n, s in cli.record().read().stacks.items()}
        out["wrong passphrase: up"] = run_result(cli, wrong.run("up", GATEWAY, lambda e: None))
        out["wrong passphrase: up raw"] = cli.calls[-1]
        out["wrong passphrase: show secrets"] = cli.raw(wrong, GATEWAY, "stack", "output", "--json", "--show-secrets",
                                                        "--stack", "gateway")
        del os.environ["PULUMI_CONFIG_PASSPHRASE"]
        out["no passphrase: new stack"] = cli.raw(wrong, GATEWAY, "stack", "select", "--create", "--stack", "fresh")
        return out

    seen = both(tmp_path, monkeypatch, scenario)
    assert "is locked by another update" in seen["locked"]["error"]
    assert seen["locked raw"]["error"] == "ConcurrentUpdateError"
    assert "no stack named 'platform-gone' found" in seen["rename missing"][0]
    assert seen["rename onto existing"][1]["error"] == "StackAlreadyExistsError"
    assert seen["select missing"] == {"code": 6, "error": "StackNotFoundError",
                                      "message": "error: no stack named 'gone' found"}
    assert "modelplane destroy --unprotect" in seen["protected destroy"]["error"]
    assert "the fleet's manifests are invalid" in seen["program raises"]["error"]
    assert seen["wrong passphrase: record"]["gateway"]["plain"] == "hello"
    assert "incorrect passphrase" in seen["wrong passphrase: up"]["error"]


def test_a_platform_stack_moved_into_the_one_project_reads_the_same(tmp_path, monkeypatch):
    def scenario(cli: Cli) -> dict:
        stack_id = StackId.platform("moved")
        spec = StackSpec(stack_id, "")
        runner = cli.runner()
        old = auto.create_or_select_stack(stack_name="platform-moved", project_name=LEGACY_PLATFORM_PROJECT,
                                          program=applied,
                                          opts=runner.workspace_options(spec, LEGACY_PLATFORM_PROJECT))
        old.up(color="never")
        record = cli.record()
        before = record.read()
        legacy = dict(record.legacy)
        runner.move_project(stack_id, legacy["platform-moved"])
        after = record.read()
        moved = cli.raw(runner, spec, "stack", "export", "--stack", "platform-moved")
        assert "json" in moved, f"{cli.kind}: {moved}"
        return {"before": sorted(before.stacks), "legacy before": legacy, "legacy after": dict(record.legacy),
                "after": {n: dict(s.outputs) for n, s in after.stacks.items()},
                "urns": sorted(r["urn"] for r in moved["json"]["deployment"]["resources"])}

    seen = both(tmp_path, monkeypatch, scenario)
    assert seen["legacy before"] == {"platform-moved": "organization"} and seen["legacy after"] == {}
    assert all(urn.startswith(f"urn:pulumi:platform-moved::{PLATFORM_PROJECT}::") for urn in seen["urns"])
