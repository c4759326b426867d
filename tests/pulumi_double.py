"""A strict stand-in for the `pulumi` CLI at the process boundary, for tests only.

Installed as an executable named `pulumi` on PATH (`install(tmp_path)`), it answers the commands
and files Pulumi's automation API uses: `version`; `stack select [--create]`, `stack init`,
`stack output`, `stack ls --json`, `stack history`, `stack export`, `stack rm`, `stack rename` (also into another project);
`config set-all` / `config set`; `state unprotect`;
`preview`, `up`, `destroy`, `refresh` (with `--preview-only`), sending engine events to
`--event-log` (over gRPC to the automation API's event server for a `tcp://` address, else to a
file); `cancel`. Anything else is refused, as an unknown command would be. Every call is recorded
(argv, working directory, PULUMI_* environment keys, whether it ran in a process group of its own) in
`calls.jsonl`.

It is the program side too (tests/pulumi_engine.py): `up` and `preview` run the stack's program,
inline (`--client`, the automation API's language server) or local (`Pulumi.yaml`'s `main`), serve
its resource monitor, compute each step against the stack's checkpoint in the backend folder and
keep what the program registered and exported. Providers are mocked; nothing is deployed.

What it enforces, like the real CLI: a project file in the working directory; a `file://` backend
folder that exists (PULUMI_BACKEND_URL or the project's `backend.url`); stack names of letters,
digits, `-`, `_` and `.`; an operation needs a stack that exists; `--yes` for up/destroy/refresh;
`--client` for an inline program; an existing `--event-log` folder; the passphrase a stack was
created with (PULUMI_CONFIG_PASSPHRASE or _FILE) for its secrets; the project's declared config
types and required keys; one update per stack at a time (a lock file in the backend); `protect`
and provider-side deletion guards; `stack rename` needs the new name free. Its answers (JSON shapes, exit
codes, error classes and first error lines) are held to the real CLI's by tests/test_cli_contract.py.

Told what to do through `control.json` in its folder (`PULUMI_DOUBLE_DIR`):
  {"fail": {"<stack>": "error text"},   the next up/preview/destroy/refresh of that stack fails before its program
   "failOn": {"<stack>": {"resource": "<type or name>", "error": "text"}},  that create fails, mid-update
   "hang": ["<stack>"],                 up/destroy/refresh of that stack waits until SIGINT (while it waits, the
                                        files `hanging` and `hanging.<stack>` are in the folder)
   "resourceOutputs": {"<stack>": {"<type>[::<name>]": {...}}},  what a mocked provider returns
   "replaceOn": {"<type>": ["<input key>"]},  a change of these inputs replaces the resource
   "drift": ["<stack>"]}                refresh of that stack finds changes (--preview-only reports them, a
                                        refresh records them in its history)
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import signal
import stat
import sys
import time
from pathlib import Path

import yaml

from tests.pulumi_engine import (SECRET_SIG, SECRET_VALUE, Backend, Failed, Providers, Refused, Update,
                                 check_stack_name, destroy, is_secret, outputs_of, reveal, run_inline, run_local, serve,
                                 stamp)

VERSION = "3.272.0"


def on_path(folder: Path, monkeypatch, passphrase: str) -> Path:
    """Install the double in `folder`, put it first on PATH, and change into `folder/work` (made if missing);
    returns it."""
    import os

    bin_dir = install(folder)
    work = folder / "work"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PULUMI_DOUBLE_DIR", str(folder / "double"))
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", passphrase)
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    return work


def install(folder: Path) -> Path:
    """Write the `pulumi` executable into folder/bin; return its folder. It is a thin client of one warm double
    process (`Warm`) that forks a child per call, so a call costs a fork, not an interpreter and its imports;
    the child answers exactly as `main` does in a process of its own (its own environment, working directory,
    standard streams and signals)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "pulumi"
    script.write_text(CLIENT.format(python=sys.executable, address=Warm.address()))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (folder / "double").mkdir(exist_ok=True)
    return bin_dir


# The `pulumi` client: hands its argv, working directory, environment and standard streams to the warm double,
# forwards SIGINT and SIGTERM to the child answering it, and exits with that child's exit code.
CLIENT = """#!{python} -S
import json, os, signal, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect({address!r})
request = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ),
                      "ownGroup": os.getpgrp() == os.getpid()}}).encode()
socket.send_fds(s, [struct.pack("!Q", len(request))], [0, 1, 2])
s.sendall(request)
answer = s.makefile("r")
child = int(answer.readline())
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda number, _: os.kill(child, number))
code = answer.readline()
sys.exit(int(code) if code.strip() else 255)
"""


class Warm:
    """One process per test session with the double and the engine's gRPC modules imported; it forks a child per
    call. Started on first use, stopped when the session's process exits."""

    _address: str | None = None

    @classmethod
    def address(cls) -> str:
        if cls._address is None:
            import atexit
            import subprocess
            import tempfile

            folder = tempfile.mkdtemp(prefix="pulumi-double-")
            address = os.path.join(folder, "socket")
            root = Path(__file__).resolve().parent.parent
            process = subprocess.Popen([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(root)!r}); "
                                        f"from tests.pulumi_double import serve_warm; serve_warm({address!r})"],
                                       stdin=subprocess.DEVNULL)
            atexit.register(cls._stop, process, folder)
            deadline = time.monotonic() + 60
            while not os.path.exists(address + ".ready"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the warm pulumi double did not start")
                time.sleep(0.01)
            cls._address = address
        return cls._address

    @staticmethod
    def _stop(process, folder: str) -> None:
        """Stop the server and wait for it, so the CPU its children spent is counted in the session's (`time`)."""
        import shutil
        import subprocess

        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def serve_warm(address: str) -> None:
    import socket
    import struct

    import grpc  # noqa: F401  (what `up` and `preview` import, imported once here; no channel before a fork)
    from google.protobuf import empty_pb2, json_format, struct_pb2  # noqa: F401
    from pulumi.runtime.proto import engine_pb2_grpc, language_pb2_grpc, resource_pb2_grpc  # noqa: F401

    import automation.checks.fake_outputs  # noqa: F401
    import workloads.readiness  # noqa: F401

    def stop(*_) -> None:  # reap every child first: their CPU then counts in this process's children
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(64)
    Path(address + ".ready").touch()
    while True:
        conn, _ = listener.accept()
        header, fds, _, _ = socket.recv_fds(conn, 8, 3)
        (size,) = struct.unpack("!Q", header)
        request = b""
        while len(request) < size:
            request += conn.recv(size - len(request))
        child = os.fork()
        if child == 0:
            listener.close()
            _answer(conn, fds, json.loads(request))
        conn.close()
        for fd in fds:
            os.close(fd)
        while True:  # reap the children that finished
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def _answer(conn, fds: list[int], request: dict) -> None:
    """In the forked child: become the process the client would have started, run the command, report its code."""
    code = 255
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not the engine's
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        conn.sendall(f"{os.getpid()}\n".encode())
        code = main(request["argv"], request.get("ownGroup"))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            conn.sendall(f"{code}\n".encode())
        finally:
            os._exit(code)


def _flag(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _passphrase() -> str | None:
    if os.environ.get("PULUMI_CONFIG_PASSPHRASE") is not None:
        return os.environ["PULUMI_CONFIG_PASSPHRASE"]
    if os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE"):
        return Path(os.environ["PULUMI_CONFIG_PASSPHRASE_FILE"]).read_text().rstrip("\n")
    return None


PASSPHRASE_MISSING = "passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment variables"
# what the CLI (3.277) says when the passphrase is missing (a prefix to PASSPHRASE_MISSING) or wrong, by what it was doing
PASSPHRASE_ERRORS = {
    "": ("", "incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct passphrase"),
    "operation": ("getting stack configuration: get stack secrets manager: ",
                  "getting stack configuration: get stack secrets manager: incorrect passphrase"),
    "output": ('constructing secrets manager of type "passphrase": constructing secrets manager: ',
               "failed to decrypt: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct passphrase "
               "or set PULUMI_CONFIG_PASSPHRASE_FILE to a file containing the passphrase"),
}


def _holds_secret(value) -> bool:
    if is_secret(value):
        return True
    if isinstance(value, dict):
        return any(_holds_secret(v) for v in value.values())
    return isinstance(value, list) and any(_holds_secret(v) for v in value)


def _salt(stack: str, phrase: str) -> str:
    return "v1:" + hashlib.sha256(f"{stack}\0{phrase}".encode()).hexdigest()[:24]


class Double:
    """One CLI invocation: the project in the working directory, its backend, the stack's config file."""

    def __init__(self, folder: Path, cwd: Path):
        self.folder = folder
        self.cwd = cwd
        control = folder / "control.json"
        self.control = json.loads(control.read_text()) if control.exists() else {}
        self._settings: dict | None = None
        self._backend: Backend | None = None

    @property
    def settings(self) -> dict:
        if self._settings is None:
            project_file = self.cwd / "Pulumi.yaml"
            if not project_file.is_file():
                raise Refused("error: no Pulumi.yaml project file found (searching upwards from "
                              f"{self.cwd}). If you have not created a project yet, use `pulumi new` to do so")
            self._settings = yaml.safe_load(project_file.read_text()) or {}
            if not self._settings.get("name"):
                raise Refused(f"error: {project_file}: project is missing a 'name' attribute")
        return self._settings

    @property
    def project(self) -> str:
        return str(self.settings["name"])

    @property
    def backend(self) -> Backend:
        """Opened on first use, as the CLI logs in: PULUMI_BACKEND_URL, else the project's `backend.url`."""
        if self._backend is None:
            url = os.environ.get("PULUMI_BACKEND_URL") or (self.settings.get("backend") or {}).get("url")
            self._backend = Backend(url)
        return self._backend

    def stack_name(self, args: list[str]) -> str:
        name = _flag(args, "--stack")
        if not name:
            raise Refused("error: no stack selected; use --stack")
        if "/" in name:  # organization/project/stack or project/stack: this project's only
            parts = name.split("/")
            if len(parts) > 1 and parts[-2] != self.project:
                raise Refused(f"error: stack {name} belongs to another project than {self.project}")
            name = parts[-1]
        check_stack_name(name)
        return name

    def stack(self, args: list[str]) -> tuple[str, dict]:
        name = self.stack_name(args)
        return name, self.backend.load(self.project, name)

    # ---- config: Pulumi.<stack>.yaml in the project folder, as the CLI keeps it -----------------

    def config_file(self, stack: str) -> Path:
        return self.cwd / f"Pulumi.{stack}.yaml"

    def read_config(self, stack: str) -> dict:
        path = self.config_file(stack)
        return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}

    def write_config(self, stack: str, content: dict) -> None:
        self.config_file(stack).write_text(yaml.safe_dump(content, sort_keys=True))

    def needs_passphrase(self, stack: str, when: str = "", decrypts: bool = True) -> None:
        """A passphrase-encrypted stack: the CLI needs the passphrase it was created with for any secret, and for
        any operation (it opens the stack's secrets manager first). `when`: what the CLI says it was doing, as
        `PASSPHRASE_ERRORS` words it; `decrypts`: whether there is a secret to decrypt (a wrong passphrase is
        found out only then; a missing one at once)."""
        salt = self.read_config(stack).get("encryptionsalt")
        if salt is None:
            return
        missing, wrong = PASSPHRASE_ERRORS[when]
        phrase = _passphrase()
        if phrase is None:
            raise Refused(f"error: {missing}{PASSPHRASE_MISSING}")
        if decrypts and salt != _salt(stack, phrase):
            raise Refused(f"error: {wrong}")

    def set_config(self, stack: str, key: str, value: str, secret: bool) -> None:
        if ":" not in key:
            key = f"{self.project}:{key}"
        if secret:
            self.needs_passphrase(stack)
        content = self.read_config(stack)
        stored: object = {"secure": "v1:" + base64.b64encode(value.encode()[::-1]).decode()} if secret else value
        content.setdefault("config", {})[key] = stored
        self.write_config(stack, content)

    def program_config(self, stack: str) -> tuple[dict[str, str], list[str]]:
        """The config a program is given, checked against the project's declared keys as the CLI does."""
        values: dict[str, str] = {}
        secrets = []
        for key, value in (self.read_config(stack).get("config") or {}).items():
            if isinstance(value, dict) and "secure" in value:
                self.needs_passphrase(stack)
                values[key] = base64.b64decode(value["secure"][3:]).decode()[::-1]
                secrets.append(key)
            else:
                values[key] = value if isinstance(value, str) else json.dumps(value)
        for name, declared in (self.settings.get("config") or {}).items():
            key = name if ":" in name else f"{self.project}:{name}"
            declared = declared if isinstance(declared, dict) else {"default": declared}
            if key not in values:
                if "default" not in declared and "value" not in declared:
                    raise Refused(f"error: Stack '{stack}' is missing configuration value '{key}'")
                default = declared.get("default", declared.get("value"))
                values[key] = default if isinstance(default, str) else json.dumps(default)
            kind = declared.get("type")
            if kind == "boolean" and values[key] not in ("true", "false"):
                raise Refused(f"error: Stack '{stack}' with configuration key '{key}' must be of type 'boolean'")
            if kind == "integer" and not re.fullmatch(r"-?[0-9]+", values[key]):
                raise Refused(f"error: Stack '{stack}' with configuration key '{key}' must be of type 'integer'")
        return values, sorted(secrets)

    # ---- commands --------------------------------------------------------------------------------

    def run(self, args: list[str]) -> tuple[str, int]:
        if args[:1] == ["version"]:
            return f"v{VERSION}\n", 0
        if args[:1] == ["install"]:  # what the Python host would pip-install; nothing is installed here
            plan = install_plan(self.cwd)
            return json.dumps(None if plan is None else {"cwd": str(plan[0]), "requirements": plan[1]}) + "\n", 0
        if args[:2] in (["stack", "select"], ["stack", "init"]):
            return self.select_or_init(args)
        if args[:2] == ["config", "set-all"]:
            name, _ = self.stack(args)
            rest = args[2:]
            for i, a in enumerate(rest):
                if a in ("--plaintext", "--secret") and i + 1 < len(rest):
                    key, _, value = rest[i + 1].partition("=")
                    self.set_config(name, key, value, a == "--secret")
            return "", 0
        if args[:2] == ["config", "set"]:
            name, _ = self.stack(args)
            rest = args[2:]
            tail = rest[rest.index("--") + 1:] if "--" in rest else []
            rest = rest[:rest.index("--")] if "--" in rest else rest
            stack_flag = _flag(args, "--stack")
            positional = [a for a in rest if not a.startswith("--") and a != stack_flag] + tail
            if len(positional) != 2:
                raise Refused("error: config set takes a key and a value")
            self.set_config(name, positional[0], positional[1], "--secret" in rest)
            return "", 0
        if args[:2] == ["stack", "output"]:  # plain values; secrets masked unless --show-secrets, as the CLI does
            name, content = self.stack(args)
            shown = "--show-secrets" in args
            if shown:
                self.needs_passphrase(name, "output", any(_holds_secret(v) for v in outputs_of(content).values()))
            return json.dumps({k: reveal(v) if shown or not is_secret(v) else "[secret]"
                               for k, v in outputs_of(content).items()}), 0
        if args[:2] == ["stack", "ls"]:  # this project's stacks, as the DIY backend lists them (short names)
            if "--json" not in args:
                raise Refused("error: the pulumi double answers `stack ls` only with --json")
            # no updateInProgress: the DIY backend does not say, even while an update holds the lock
            listed = []
            current = self.selected()
            for _, name in self.backend.stacks(self.project):
                content = self.backend.load(self.project, name)
                entry = {"name": name, "current": name == current}
                manifest_time = (content["checkpoint"]["latest"].get("manifest") or {}).get("time")
                if manifest_time:
                    entry["lastUpdate"] = manifest_time
                entry["resourceCount"] = len(content["checkpoint"]["latest"]["resources"])
                listed.append(entry)
            return json.dumps(listed), 0
        if args[:2] == ["stack", "rm"]:  # as the CLI: refused while the stack holds resources, unless --force
            name = [a for a in args[2:] if not a.startswith("-")][-1]
            if not self.backend.exists(self.project, name):
                raise Refused(f"error: no stack named '{name}' found")
            content = self.backend.load(self.project, name)
            if content["checkpoint"]["latest"]["resources"] and "--force" not in args:
                raise Refused(f"error: '{name}' still has resources; removal rejected. Possible actions:")
            self.backend.stack_file(self.project, name).unlink()
            self.config_file(name).unlink(missing_ok=True)
            return f"Stack '{name}' has been removed!", 0
        if args[:2] == ["stack", "history"]:  # newest first; a page of --page-size entries when given
            _, content = self.stack(args)
            history = content["history"][::-1]
            size = int(_flag(args, "--page-size") or 0)
            if size:
                page = int(_flag(args, "--page") or 1)
                history = history[(page - 1) * size:page * size]
            return json.dumps(history), 0
        if args[:2] == ["stack", "export"]:
            name, content = self.stack(args)
            shown = "--show-secrets" in args
            if shown:
                self.needs_passphrase(name, "output", _holds_secret(content["checkpoint"]["latest"]["resources"]))
            return json.dumps(self.export(name, content, shown)), 0
        if args[:2] == ["stack", "rename"]:
            old, _ = self.stack(args)
            parts = args[2].split("/")
            if len(parts) == 3 and parts[1] != self.project:  # organization/project/stack: into another project
                self.backend.rename(self.project, old, parts[2], parts[1])
                return "", 0
            new = self.stack_name(["--stack", args[2]])
            self.backend.rename(self.project, old, new)
            if self.config_file(old).exists():
                self.config_file(old).rename(self.config_file(new))
            if self.selected() == old:  # the renamed stack stays the selected one
                self.select(new)
            return "", 0
        if args[:2] == ["state", "unprotect"]:
            return self.unprotect(args)
        if args[:1] == ["cancel"]:
            name, _ = self.stack(args)
            self.backend.unlock_all(self.project, name)  # on a DIY backend this only removes the lock
            return "", 0
        if args[:1] in (["up"], ["preview"], ["destroy"], ["refresh"]):
            return self.operation(args[0], args)
        raise Refused(f"error: unknown command {' '.join(args[:2])!r} (the pulumi double answers only what "
                      "the automation API uses)")

    def select_or_init(self, args: list[str]) -> tuple[str, int]:
        given = _flag(args, "--stack") or (args[2] if len(args) > 2 and not args[2].startswith("-") else None)
        if not given:
            raise Refused("error: a stack name is required")
        name = self.stack_name(["--stack", given])
        if self.backend.exists(self.project, name):
            if args[1] == "init":
                raise Refused(f"error: stack 'organization/{self.project}/{name}' already exists")
            self.select(name)
            return "", 0
        if args[1] == "select" and "--create" not in args:
            raise Refused(f"error: no stack named '{name}' found", code=6)
        provider = _flag(args, "--secrets-provider") or "passphrase"  # a DIY backend's default
        if provider == "passphrase" and "encryptionsalt" not in self.read_config(name):
            phrase = _passphrase()
            if phrase is None:
                raise Refused(f"error: could not create secrets manager for new stack: {PASSPHRASE_MISSING}")
            self.write_config(name, {**self.read_config(name), "encryptionsalt": _salt(name, phrase)})
        self.backend.create(self.project, name)
        self.select(name)
        return "", 0

    # the selected stack of each project folder, as the CLI keeps it in PULUMI_HOME's workspaces
    def selected(self) -> str | None:
        path = self.folder / "selected.json"
        return (json.loads(path.read_text()) if path.exists() else {}).get(f"{self.cwd}:{self.project}")

    def select(self, name: str) -> None:
        path = self.folder / "selected.json"
        selected = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**selected, f"{self.cwd}:{self.project}": name}))

    def export(self, name: str, content: dict, shown: bool) -> dict:
        """`stack export`: the checkpoint as the CLI prints it. Secrets are ciphertext, or with --show-secrets
        their JSON text as `plaintext`; empty fields are left out, as the CLI leaves them out."""
        def secret(value):
            if shown:
                return {SECRET_SIG: SECRET_VALUE, "plaintext": json.dumps(reveal(value))}
            return {SECRET_SIG: SECRET_VALUE, "ciphertext": "v1:" + base64.b64encode(
                json.dumps(reveal(value)).encode()).decode()}

        def sealed(value):
            if is_secret(value):
                return secret(value)
            if isinstance(value, dict):
                return {k: sealed(v) for k, v in value.items()}
            if isinstance(value, list):
                return [sealed(v) for v in value]
            return value

        latest = content["checkpoint"]["latest"]
        resources = []
        for res in latest["resources"]:
            out = {"urn": res["urn"], "custom": bool(res.get("custom"))}
            for key in ("id", "type", "inputs", "outputs", "parent", "protect", "retainOnDelete", "dependencies",
                        "provider"):
                if res.get(key) not in (None, False, "", {}, []):
                    out[key] = sealed(res[key])
            resources.append(out)
        salt = self.read_config(name).get("encryptionsalt")
        manifest = {"time": (latest.get("manifest") or {}).get("time"), "magic": "", "version": f"v{VERSION}"}
        return {"version": 3, "deployment": {
            "manifest": manifest, "secrets_providers": {"type": "passphrase", "state": {"salt": salt}},
            "resources": resources, "metadata": {}}}

    def unprotect(self, args: list[str]) -> tuple[str, int]:
        name, content = self.stack(args)
        if "--yes" not in args:
            raise Refused("error: --yes must be passed in to proceed when running in non-interactive mode")
        target = None if "--all" in args else next((a for a in args[2:] if a.startswith("urn:")), None)
        for res in content["checkpoint"]["latest"]["resources"]:
            if target is None or res["urn"] == target:
                res["protect"] = False
        self.backend.save(self.project, name, content)
        return "", 0

    def operation(self, verb: str, args: list[str]) -> tuple[str, int]:
        name, content = self.stack(args)
        preview_only = verb == "preview" or "--preview-only" in args
        if verb in ("up", "destroy", "refresh") and "--yes" not in args and not preview_only:
            raise Refused(f"error: --yes must be passed in to proceed when running in non-interactive mode ({verb})")
        client = _flag(args, "--client")
        if verb in ("up", "preview") and not client and _flag(args, "--exec-kind") == "auto.inline":
            raise Refused("error: an inline program needs --client")
        self.needs_passphrase(name, "operation")
        config, secret_keys = self.program_config(name) if verb in ("up", "preview") else ({}, [])
        events = Events(_flag(args, "--event-log"))
        lock = self.backend.lock(self.project, name) if not preview_only else None
        self.began = time.time()  # the update's start in its history: once it holds the stack's lock
        _release_global_lock()  # other stacks' commands go on while this one runs its program
        try:
            events.emit({"preludeEvent": {"config": {k: "[secret]" if k in secret_keys else v
                                                     for k, v in config.items()}}})
            failure = (self.control.get("fail") or {}).get(name)
            if failure:
                return self.failed(events, failure, {})
            if name in (self.control.get("hang") or []) and not preview_only:
                self.wait_for_interrupt(events, verb, name)
            if verb in ("up", "preview"):
                return self.update(name, events, config, secret_keys, client, preview_only,
                                   int(_flag(args, "--parallel") or 4))
            if verb == "destroy":
                return self.destroy(name, events, preview_only)
            return self.refresh(name, content, events, preview_only)
        finally:
            _take_global_lock()
            if lock is not None:
                lock.unlink(missing_ok=True)

    def failed(self, events: Events, message: str, changes: dict) -> tuple[str, int]:
        events.emit({"diagnosticEvent": {"message": message + "\n", "severity": "error", "color": "never"}})
        events.emit({"summaryEvent": {"resourceChanges": changes, "maybeCorrupt": False, "durationSeconds": 0}})
        raise Failed(f"error: {message}")

    def save(self, name: str, resources: list[dict], kind: str, changes: dict, ok: bool, retained: list[str]) -> None:
        """Write the checkpoint as it is after the operation (read afresh: other stacks' commands ran meanwhile)."""
        content = self.backend.load(self.project, name)
        content["checkpoint"]["latest"]["resources"] = resources
        # as the DIY backend: the checkpoint's manifest time (milliseconds) is its `stack ls` lastUpdate, written
        # before the history entry, whose start and end are whole seconds
        content["checkpoint"]["latest"].setdefault("manifest", {})["time"] = stamp(time.time())
        content["history"].append({"version": 0, "kind": kind, "startTime": stamp(self.began, whole=True),
                                   "message": "", "environment": {}, "config": {},
                                   "result": "succeeded" if ok else "failed", "endTime": stamp(time.time(), whole=True),
                                   "resourceChanges": changes})  # a DIY backend's history entries are version 0
        self.backend.save(self.project, name, content)
        if retained:  # deleted from the stack, left in the cloud
            with open(self.folder / "retained.jsonl", "a", encoding="utf-8") as f:
                f.writelines(json.dumps({"stack": name, "urn": urn}) + "\n" for urn in retained)

    def update(self, name: str, events: Events, config: dict, secret_keys: list[str], client: str | None,
               dry_run: bool, parallel: int) -> tuple[str, int]:
        before = self.backend.load(self.project, name)["checkpoint"]["latest"]["resources"]
        update = Update(self.project, name, before, Providers(name, self.control), dry_run, events.emit, self.backend)
        diagnostics: list[str] = []

        def log(severity: str, message: str, urn: str) -> None:
            if severity == "error":
                diagnostics.append(message.strip())
            events.emit({"diagnosticEvent": {"urn": urn, "message": message.rstrip() + "\n", "severity": severity,
                                             "color": "never"}})

        server, monitor = serve(update, log)
        try:
            if client:
                error = run_inline(client, monitor, self.project, name, config, secret_keys, dry_run, parallel,
                                   str(self.cwd))
            else:
                error = self.run_local(monitor, name, config, secret_keys, dry_run, parallel)
        finally:
            server.stop(0)
        resources = update.finish(program_failed=bool(error or update.errors))
        ok = not (error or update.errors)
        if not dry_run:
            self.save(name, resources, "update", update.changes, ok, update.retained)
        if not ok:
            if error and not diagnostics:
                log("error", error, "")
            message = (update.errors or diagnostics or [error])[0] or "update failed"
            return self.failed(events, message.strip(), update.changes)
        events.emit({"summaryEvent": {"resourceChanges": update.changes, "maybeCorrupt": False, "durationSeconds": 1}})
        return "", 0

    def run_local(self, monitor: str, name: str, config: dict, secret_keys: list[str], dry_run: bool,
                  parallel: int) -> str:
        """A program from Pulumi.yaml (`runtime`, `main`), run as the Python language host runs it."""
        runtime = self.settings.get("runtime")
        runtime_name = runtime.get("name") if isinstance(runtime, dict) else runtime
        if runtime_name != "python":
            raise Refused(f"error: the pulumi double runs only python programs, not {runtime_name!r}")
        main_dir = (self.cwd / (self.settings.get("main") or ".")).resolve()
        if not (main_dir / "__main__.py").is_file():
            raise Refused(f"error: the program's main folder {main_dir} has no __main__.py")
        options = (runtime.get("options") or {}) if isinstance(runtime, dict) else {}
        venv = options.get("virtualenv")
        python = self.cwd / venv / "bin" / "python" if venv else Path(sys.executable)
        if not python.exists():
            raise Refused(f"error: the virtual environment {self.cwd / venv} does not exist: run `pulumi install`")
        return run_local(main_dir, monitor, self.project, name, config, secret_keys, dry_run, parallel, str(python),
                         str(self.cwd))

    def destroy(self, name: str, events: Events, dry_run: bool) -> tuple[str, int]:
        resources = self.backend.load(self.project, name)["checkpoint"]["latest"]["resources"]
        left, changes, retained, error = destroy(resources, dry_run, events.emit)
        if not dry_run:
            self.save(name, left, "destroy", changes, error is None, retained)
        if error:
            return self.failed(events, error, changes)
        events.emit({"summaryEvent": {"resourceChanges": changes, "maybeCorrupt": False, "durationSeconds": 1}})
        return "", 0

    def refresh(self, name: str, content: dict, events: Events, preview_only: bool) -> tuple[str, int]:
        resources = content["checkpoint"]["latest"]["resources"]
        count = len(resources)  # the engine counts every resource it read, the stack and components too
        if name in (self.control.get("drift") or []):  # a refresh writes what its preview reports
            changes = {"update": 1, "same": max(count - 1, 0)}
        else:
            changes = {"same": count}
        changes = {op: n for op, n in changes.items() if n}
        if not preview_only:
            self.save(name, resources, "refresh", changes, True, [])
        events.emit({"summaryEvent": {"resourceChanges": changes, "maybeCorrupt": False, "durationSeconds": 1}})
        return "", 0

    def wait_for_interrupt(self, events: Events, verb: str, stack: str) -> None:
        interrupted = []
        signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
        markers = (self.folder / "hanging", self.folder / f"hanging.{stack}")  # any stack's, and this one's
        for marker in markers:
            marker.write_text(str(os.getpid()))
        deadline = time.monotonic() + 60  # a test that forgets to interrupt still ends
        while not interrupted and time.monotonic() < deadline:
            time.sleep(0.05)
        for marker in markers:
            marker.unlink(missing_ok=True)
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


_LOCK = None  # the double's own lock: one command at a time reads and writes the backend's files


def _take_global_lock() -> None:
    fcntl.flock(_LOCK, fcntl.LOCK_EX)


def _release_global_lock() -> None:
    fcntl.flock(_LOCK, fcntl.LOCK_UN)


def main(argv: list[str], own_group: bool | None = None) -> int:
    """`own_group`: whether the process modelplane started runs in a process group of its own (the warm double's
    client says; else this process is that one)."""
    global _LOCK
    folder = Path(os.environ.get("PULUMI_DOUBLE_DIR") or Path(__file__).parent / ".double")
    folder.mkdir(parents=True, exist_ok=True)
    _LOCK = open(folder / "lock", "a")
    _take_global_lock()
    args = [a for a in argv if a not in ("--non-interactive",)]
    with open(folder / "calls.jsonl", "a", encoding="utf-8") as f:  # one line per call, before anything can fail
        f.write(json.dumps({"argv": argv, "cwd": os.getcwd(), "stack": _flag(args, "--stack"),
                            "env": sorted(k for k in os.environ if k.startswith("PULUMI_")),
                            "ownGroup": os.getpgrp() == os.getpid() if own_group is None else own_group}) + "\n")
    try:
        out, code = Double(folder, Path.cwd()).run(args)
    except Failed as exc:  # the engine ran: its diagnostics are on stdout, as the CLI prints them
        sys.stdout.write(f"Diagnostics:\n    {exc}\n")
        return exc.code
    except Refused as exc:
        print(str(exc), file=sys.stderr)
        return exc.code
    sys.stdout.write(out)
    return code


def install_plan(project_dir: Path) -> tuple[Path, list[str]] | None:
    """What `pulumi install` has the Python host install, as the host does it (pip toolchain): `pip install -r
    requirements.txt` run in the program's folder (Pulumi.yaml's `main`), not the project's; None when that
    folder has no requirements.txt (the host then installs nothing, and says nothing). Returns the folder pip
    runs in and the file's requirement lines."""
    settings = yaml.safe_load((project_dir / "Pulumi.yaml").read_text()) or {}
    program = (project_dir / (settings.get("main") or ".")).resolve()
    requirements = program / "requirements.txt"
    if not requirements.is_file():
        return None
    lines = [line.split("#", 1)[0].strip() for line in requirements.read_text().splitlines()]
    return program, [line for line in lines if line]


def calls(folder: Path) -> list[dict]:
    path = folder / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def checkpoint(backend: Path, project: str, stack: str) -> dict:
    """A stack's checkpoint in a backend folder the double wrote (for assertions)."""
    return Backend(f"file://{backend}").load(project, stack)  # secrets unsealed, as the CLI reads them


def resources(backend: Path, project: str, stack: str) -> list[dict]:
    return checkpoint(backend, project, stack)["checkpoint"]["latest"]["resources"]


def stack_outputs(backend: Path, project: str, stack: str) -> dict:
    """A stack's outputs as plain values (secrets revealed: for assertions only)."""
    return reveal(outputs_of(checkpoint(backend, project, stack)))
