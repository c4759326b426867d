"""The real StackRunner: Pulumi's automation API, one inline program per stack.

Workspaces live under `.modelplane/stacks/<stack>/` (fixed, so each stack's config and
encryption salt persist between runs); the default backend is a local `file://` backend
under `.modelplane/backend`, with the passphrase secrets provider (`PULUMI_CONFIG_PASSPHRASE`
or `PULUMI_CONFIG_PASSPHRASE_FILE`). `--backend URL` or `PULUMI_BACKEND_URL` select a team
backend. CLI failures become domain errors with one actionable line.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from automation.programs import program_for, project_of, stack_config
from automation.runner import CLIMissing, EventSink, RunResult, StackBusy
from components.workload_objects import is_placeholder_secret, secret_config_key

INSTALL_HINT = ("install it (https://www.pulumi.com/docs/iac/download-install/), or on a machine with internet "
                "`python -c 'from pulumi import automation; automation.PulumiCommand.install()'`")


def default_backend(root: Path) -> str:
    return os.environ.get("PULUMI_BACKEND_URL") or f"file://{(root / 'backend').resolve()}"


def check_passphrase(backend: str) -> None:
    if backend.startswith("file://") or backend.startswith(("s3://", "gs://", "azblob://")):
        if not (os.environ.get("PULUMI_CONFIG_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")):
            raise CLIMissing("set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE): stack secrets "
                             "(kubeconfigs, tokens) are encrypted with it")


def secret_values(spec) -> dict[str, str]:
    """Values of placeholder Secrets, from the environment: MODELPLANE_SECRET_<NAME>_<KEY> (upper case, - as _)."""
    out = {}
    for objects in spec.payload.get("objects", {}).values():
        for obj in objects:
            if is_placeholder_secret(obj):
                for key in obj.get("stringData", {}):
                    config_key = secret_config_key(obj, key)
                    env = "MODELPLANE_" + config_key.upper().replace("-", "_").replace(".", "_")
                    if env in os.environ:
                        out[f"modelplane:{config_key}"] = os.environ[env]
    return out


class PulumiRunner:
    def __init__(self, root: Path, fleet, backend: str | None = None, pulumi_command=None, parallel: int = 2):
        from pulumi import automation as auto

        self.auto = auto
        self.root = Path(root)
        self.fleet = fleet
        self.backend = backend or default_backend(self.root)
        if pulumi_command is None:
            if shutil.which("pulumi") is None and not os.environ.get("PULUMI_HOME"):
                raise CLIMissing(f"the Pulumi CLI is not installed: {INSTALL_HINT}")
            try:
                pulumi_command = auto.PulumiCommand()
            except (FileNotFoundError, OSError):
                raise CLIMissing(f"the Pulumi CLI is not installed: {INSTALL_HINT}") from None
        self.command = pulumi_command
        self.parallel = parallel
        self._stacks: dict[str, object] = {}
        self._lock = threading.Lock()

    # ---- construction (checked in tests without running an engine) ----------------------------

    def workspace_options(self, spec):
        auto = self.auto
        work_dir = self.root / "stacks" / spec.name
        work_dir.mkdir(parents=True, exist_ok=True)
        project = project_of(spec.kind)
        env = {"PULUMI_BACKEND_URL": self.backend, "PULUMI_SKIP_UPDATE_CHECK": "true"}
        for name in ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE", "PULUMI_ACCESS_TOKEN"):
            if os.environ.get(name):
                env[name] = os.environ[name]
        return auto.LocalWorkspaceOptions(
            work_dir=str(work_dir),
            project_settings=auto.ProjectSettings(name=project, runtime="python",
                                                  backend=auto.ProjectBackend(url=self.backend),
                                                  description="modelplane: a fleet control plane for LLM inference"),
            secrets_provider="passphrase" if "app.pulumi.com" not in self.backend else None,
            env_vars=env,
            pulumi_command=self.command,
        )

    def stack(self, spec):
        auto = self.auto
        with self._lock:
            if spec.name in self._stacks:
                return self._stacks[spec.name]
        try:
            stack = auto.create_or_select_stack(stack_name=spec.name, project_name=project_of(spec.kind),
                                                program=program_for(spec, self.fleet), opts=self.workspace_options(spec))
            config = {k: auto.ConfigValue(value=v) for k, v in stack_config(spec).items()}
            config.update({k: auto.ConfigValue(value=v, secret=True) for k, v in secret_values(spec).items()})
            if config:
                stack.set_all_config(config)
        except auto.errors.CommandError as exc:
            raise StackBusy(_first_error(exc)) if isinstance(exc, auto.ConcurrentUpdateError) else exc
        with self._lock:
            self._stacks[spec.name] = stack
        return stack

    # ---- the StackRunner interface ---------------------------------------------------------------

    def run(self, operation: str, spec, on_event: EventSink) -> RunResult:
        auto = self.auto

        def forward(event) -> None:
            pre = getattr(event, "resource_pre_event", None)
            if pre is not None and pre.metadata is not None:
                on_event({"stack": spec.name, "type": "resource", "op": str(pre.metadata.op.value if hasattr(pre.metadata.op, "value") else pre.metadata.op),
                          "urn": pre.metadata.urn, "resourceType": pre.metadata.type})
            diag = getattr(event, "diagnostic_event", None)
            if diag is not None and diag.severity in ("error", "warning"):
                on_event({"stack": spec.name, "type": "diagnostic", "severity": diag.severity,
                          "message": (diag.message or "").strip()[:500]})

        try:
            stack = self.stack(spec)
            if operation == "preview":
                result = stack.preview(on_event=forward, parallel=self.parallel, color="never")
                return RunResult(spec.name, operation, True, _counts(result.change_summary))
            if operation == "preview-destroy":
                result = stack.preview_destroy(on_event=forward, color="never")
                return RunResult(spec.name, operation, True, _counts(result.change_summary))
            if operation == "up":
                result = stack.up(on_event=forward, parallel=self.parallel, color="never")
                return RunResult(spec.name, operation, True, _counts(result.summary.resource_changes), _plain(result.outputs))
            if operation == "destroy":
                result = stack.destroy(on_event=forward, color="never")
                return RunResult(spec.name, operation, True, _counts(result.summary.resource_changes))
            if operation == "refresh":
                result = stack.refresh(on_event=forward, color="never")
                return RunResult(spec.name, operation, True, _counts(result.summary.resource_changes))
            raise ValueError(f"unknown operation {operation}")
        except auto.ConcurrentUpdateError:
            return RunResult(spec.name, operation, False,
                             error=f"stack {spec.name} is locked by another update (another `modelplane up`, "
                                   "or a crashed one: run `pulumi cancel` in its workspace to release it)")
        except auto.errors.CommandError as exc:
            return RunResult(spec.name, operation, False, error=_first_error(exc))
        except CLIMissing:
            raise
        except Exception as exc:  # the program itself failed (invalid input reaches here as RunError)
            return RunResult(spec.name, operation, False, error=f"{type(exc).__name__}: {exc}")

    def cancel(self, stack_name: str) -> None:
        stack = self._stacks.get(stack_name)
        if stack is not None:
            try:
                stack.cancel()  # the engine stops at a safe point; the update reports itself cancelled
            except Exception:
                pass


def _counts(summary) -> dict[str, int]:
    return {str(k.value if hasattr(k, "value") else k): int(v) for k, v in (summary or {}).items()}


def _plain(outputs) -> dict:
    """Stack outputs without secrets: only these are stored in the state file."""
    return {k: v.value for k, v in (outputs or {}).items() if not v.secret}


def _first_error(exc) -> str:
    text = getattr(exc, "stderr", None) or str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("error:")]
    return (lines[0] if lines else text.strip().splitlines()[-1] if text.strip() else type(exc).__name__)[:400]
