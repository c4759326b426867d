"""A strict stand-in for the `pulumi` CLI at the process boundary, for tests only.

Installed as an executable named `pulumi` on PATH (`install(tmp_path)`), it answers the commands
and files Pulumi's automation API uses: `version`; `stack select --create`, `stack init`,
`stack output`, `stack history`, `stack rename`; `config set-all` / `config set`; `preview`,
`up`, `destroy`, `refresh` (with `--preview-only`) sending engine events (prelude, resource
steps, diagnostics, summary, cancel) to `--event-log`: over gRPC to the automation API's event
server for a `tcp://` address (what the SDK uses with a CLI newer than 3.205), else to a file; `cancel`. Anything else
is refused, as an unknown command would be. It is a contract double: it records what the real
CLI would be asked (every argv, working directory and environment key, in `calls.jsonl`) and
keeps per-stack config, outputs and history, so that the runner, orchestrator, CLI and portal
run end to end; it never deploys anything and never runs a program.

What it enforces, like the real CLI: an operation needs a stack that exists (`stack select
--create` or `stack init` first), `--yes` for up/destroy/refresh, `--client` for an inline
program's up/preview, an existing `--event-log` folder; `stack rename` needs the new name free.

Told what to do through `control.json` in its folder (`PULUMI_DOUBLE_DIR`):
  {"fail": {"<stack>": "error text"},   the next up/preview/destroy/refresh of that stack fails
   "hang": ["<stack>"],                 up/destroy/refresh of that stack waits until SIGINT
   "outputs": {"<stack>": {...}},       outputs an up of that stack records
   "drift": ["<stack>"]}                refresh --preview-only of that stack reports changes
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

VERSION = "3.272.0"


def on_path(folder: Path, monkeypatch, passphrase: str) -> Path:
    """Install the double in `folder`, put it first on PATH, and change into a fresh `folder/work`; returns it."""
    import os

    bin_dir = install(folder)
    work = folder / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PULUMI_DOUBLE_DIR", str(folder / "double"))
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", passphrase)
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    return work


def install(folder: Path) -> Path:
    """Write the `pulumi` executable (this module, run by this interpreter) into folder/bin; return its folder."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "pulumi"
    root = Path(__file__).resolve().parent.parent
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(root)!r})\n"
                      "from tests.pulumi_double import main\nsys.exit(main(sys.argv[1:]))\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (folder / "double").mkdir(exist_ok=True)
    return bin_dir


class Refused(Exception):
    """What the real CLI would refuse: message on stderr, exit code 255."""


def _flag(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


class Double:
    def __init__(self, folder: Path, cwd: Path):
        self.folder = folder
        self.cwd = cwd
        self.state_path = folder / "state.json"
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {"stacks": {}}
        control = folder / "control.json"
        self.control = json.loads(control.read_text()) if control.exists() else {}

    def save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1, sort_keys=True))
        os.replace(tmp, self.state_path)

    @property
    def project(self) -> str:
        text = (self.cwd / "Pulumi.yaml").read_text() if (self.cwd / "Pulumi.yaml").exists() else ""
        for line in text.splitlines():
            if line.startswith("name:"):
                return line.split(":", 1)[1].strip()
        raise Refused("error: no Pulumi.yaml project file found in the working directory")

    def key(self, stack: str) -> str:
        return f"{self.project}/{stack}"

    def stack(self, args: list[str]) -> tuple[str, dict]:
        name = _flag(args, "--stack")
        if not name:
            raise Refused("error: no stack selected; use --stack")
        entry = self.state["stacks"].get(self.key(name))
        if entry is None:
            raise Refused(f"error: no stack named '{name}' found")
        return name, entry

    # ---- commands --------------------------------------------------------------------------------

    def run(self, args: list[str]) -> tuple[str, int]:
        if args[:1] == ["version"]:
            return f"v{VERSION}\n", 0
        if args[:2] in (["stack", "select"], ["stack", "init"]):
            name = _flag(args, "--stack") or (args[2] if len(args) > 2 and not args[2].startswith("-") else None)
            if not name:
                raise Refused("error: a stack name is required")
            key = self.key(name)
            if key not in self.state["stacks"]:
                if args[1] == "select" and "--create" not in args:
                    raise Refused(f"error: no stack named '{name}' found")
                self.state["stacks"][key] = {"config": {}, "outputs": {}, "history": [], "resources": 0}
            elif args[1] == "init":
                raise Refused(f"error: stack '{name}' already exists")
            return "", 0
        if args[:2] == ["config", "set-all"]:
            _, entry = self.stack(args)
            rest = args[2:]
            for i, a in enumerate(rest):
                if a in ("--plaintext", "--secret") and i + 1 < len(rest):
                    key, _, value = rest[i + 1].partition("=")
                    entry["config"][key] = {"value": value, "secret": a == "--secret"}
            return "", 0
        if args[:2] == ["config", "set"]:
            _, entry = self.stack(args)
            positional = [a for a in args[2:] if not a.startswith("--") and a != _flag(args, "--stack")]
            if len(positional) != 2:
                raise Refused("error: config set takes a key and a value")
            entry["config"][positional[0]] = {"value": positional[1], "secret": "--secret" in args}
            return "", 0
        if args[:2] == ["stack", "output"]:  # plain values; secrets masked unless --show-secrets, as the CLI does
            _, entry = self.stack(args)
            shown = "--show-secrets" in args
            return json.dumps({k: v["value"] if shown or not v["secret"] else "[secret]"
                               for k, v in entry["outputs"].items()}), 0
        if args[:2] == ["stack", "history"]:
            _, entry = self.stack(args)
            return json.dumps(entry["history"][-1:][::-1]), 0
        if args[:2] == ["stack", "rename"]:
            old, entry = self.stack(args)
            new = args[2]
            if self.key(new) in self.state["stacks"]:
                raise Refused(f"error: a stack named '{new}' already exists")
            self.state["stacks"][self.key(new)] = self.state["stacks"].pop(self.key(old))
            return "", 0
        if args[:1] == ["cancel"]:
            self.stack(args)
            return "", 0  # on a DIY backend this only removes the lock
        if args[:1] in (["up"], ["preview"], ["destroy"], ["refresh"]):
            return self.operation(args[0], args)
        raise Refused(f"error: unknown command {' '.join(args[:2])!r} (the pulumi double answers only what "
                      "the automation API uses)")

    def operation(self, verb: str, args: list[str]) -> tuple[str, int]:
        name, entry = self.stack(args)
        preview_only = verb == "preview" or "--preview-only" in args
        if verb in ("up", "destroy", "refresh") and "--yes" not in args and not preview_only:
            raise Refused(f"error: --yes must be passed in to proceed when running in non-interactive mode ({verb})")
        if verb in ("up", "preview") and not any(a.startswith("--client=") for a in args):
            raise Refused("error: an inline program needs --client")
        events = Events(_flag(args, "--event-log"))
        events.emit({"preludeEvent": {"config": {k: v["value"] if not v["secret"] else "[secret]"
                                                 for k, v in entry["config"].items()}}})
        failure = (self.control.get("fail") or {}).get(name)
        if failure:
            events.emit({"diagnosticEvent": {"message": failure + "\n", "severity": "error", "color": "never"}})
            events.emit({"summaryEvent": {"resourceChanges": {}, "maybeCorrupt": False, "durationSeconds": 0}})
            raise Refused(f"error: {failure}")
        if name in (self.control.get("hang") or []) and not preview_only:
            self.wait_for_interrupt(events, verb)
        changes = self.step(verb, name, entry, preview_only, events)
        events.emit({"summaryEvent": {"resourceChanges": changes, "maybeCorrupt": False, "durationSeconds": 1}})
        if not preview_only:
            entry["history"].append({"kind": "update" if verb == "up" else verb, "startTime": _now(), "message": "",
                                     "environment": {}, "config": {}, "result": "succeeded", "endTime": _now(),
                                     "resourceChanges": changes, "version": len(entry["history"]) + 1})
        return "", 0

    def step(self, verb: str, name: str, entry: dict, preview_only: bool, events: Events) -> dict[str, int]:
        urn = f"urn:pulumi:{name}::{self.project}::pulumi:pulumi:Stack::{self.project}-{name}"
        if verb in ("up", "preview"):
            op = "same" if entry["resources"] else "create"
            events.emit({"resourcePreEvent": {"metadata": {"op": op, "urn": urn, "type": "pulumi:pulumi:Stack",
                                                           "provider": ""}}})
            if verb == "up":
                entry["resources"] = 1
                entry["outputs"] = {k: {"value": v, "secret": k == "kubeconfig"}  # the programs export it as a secret
                                    for k, v in ((self.control.get("outputs") or {}).get(name) or {}).items()}
            return {op: 1}
        if verb == "destroy":
            if preview_only:
                return {"delete": entry["resources"]}
            deleted = entry["resources"]
            entry["resources"], entry["outputs"] = 0, {}
            return {"delete": deleted}
        # refresh
        if preview_only and name in (self.control.get("drift") or []):
            return {"update": 1, "same": max(entry["resources"] - 1, 0)}
        return {"same": entry["resources"]}

    def wait_for_interrupt(self, events: Events, verb: str) -> None:
        interrupted = []
        signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
        (self.folder / "hanging").write_text(str(os.getpid()))
        self.save()
        fcntl.flock(_LOCK, fcntl.LOCK_UN)  # other stacks' commands go on while this one hangs
        deadline = time.monotonic() + 60  # a test that forgets to interrupt still ends
        while not interrupted and time.monotonic() < deadline:
            time.sleep(0.05)
        (self.folder / "hanging").unlink(missing_ok=True)
        fcntl.flock(_LOCK, fcntl.LOCK_EX)
        self.__init__(self.folder, self.cwd)  # read what the others wrote meanwhile
        events.emit({"cancelEvent": {}})
        raise Refused(f"error: {verb} canceled" if interrupted else f"error: {verb} timed out in the double")


class Events:
    """The engine's event stream: to a file, or (CLI after 3.205, as here) over gRPC to `tcp://host:port`."""

    def __init__(self, path: str | None):
        self.path = path
        self.sequence = 0
        self.stub = None
        if path is not None and path.startswith("tcp://"):
            import grpc
            from pulumi.runtime.proto import events_pb2_grpc

            self.stub = events_pb2_grpc.EventsStub(grpc.insecure_channel(path.removeprefix("tcp://")))
        elif path is not None and not Path(path).parent.is_dir():
            raise Refused(f"error: cannot write the event log {path}")

    def emit(self, event: dict) -> None:
        if self.path is None:
            return
        self.sequence += 1
        line = json.dumps({"sequence": self.sequence, "timestamp": int(time.time()), **event})
        if self.stub is not None:
            from pulumi.runtime.proto import events_pb2

            self.stub.StreamEvents(iter([events_pb2.EventRequest(event=line)]), timeout=30)
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


_LOCK = None


def main(argv: list[str]) -> int:
    global _LOCK
    folder = Path(os.environ.get("PULUMI_DOUBLE_DIR") or Path(__file__).parent / ".double")
    folder.mkdir(parents=True, exist_ok=True)
    _LOCK = open(folder / "lock", "a")  # parallel stacks run several of these at once: one at a time in the state
    fcntl.flock(_LOCK, fcntl.LOCK_EX)
    args = [a for a in argv if a not in ("--non-interactive",)]
    with open(folder / "calls.jsonl", "a", encoding="utf-8") as f:  # one line per call, before anything can fail
        f.write(json.dumps({"argv": argv, "cwd": os.getcwd(), "stack": _flag(args, "--stack"),
                            "env": sorted(k for k in os.environ if k.startswith("PULUMI_"))}) + "\n")
    double = Double(folder, Path.cwd())
    try:
        out, code = double.run(args)
    except Refused as exc:
        double.save()
        print(str(exc), file=sys.stderr)
        return 255
    double.save()
    sys.stdout.write(out)
    return code


def calls(folder: Path) -> list[dict]:
    path = folder / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
