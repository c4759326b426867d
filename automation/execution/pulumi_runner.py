"""The real StackRunner: Pulumi's automation API, one inline program per stack.

Workspaces live under `.modelplane/stacks/<stack>/` (fixed, so each stack's config and
encryption salt persist between runs); the default backend is a local `file://` backend
under `.modelplane/backend`, with the passphrase secrets provider (`PULUMI_CONFIG_PASSPHRASE`
or `PULUMI_CONFIG_PASSPHRASE_FILE`). `--backend URL` or `PULUMI_BACKEND_URL` select a team
backend. CLI failures become domain errors with one actionable line.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi

from automation.execution import load_balancers
from automation.execution.programs import program_for, stack_config
from automation.projects import LEGACY_PLATFORM_PROJECT, PLATFORM_PROJECT, project_of
from automation.record.backend import default_backend
from automation.record.applied import RECORD_OUTPUT, UpdateWindow, utc_now
from automation.execution.prerequisites import CLI_MISSING, cli_missing, is_pulumi_cloud
from automation.execution.pulumi_command import interruptible_command
from automation.execution.runner import AutomationError, CLIMissing, EventSink, Operation, RunResult, StackBusy, first_error, started_cli
from automation.local.toolchain import registered_provider_warning
from automation.planning.payloads import PlatformPayload
from automation.planning.stacks import StackSpec
from fleet.stack_id import StackId, backend_name

if TYPE_CHECKING:
    from fleet.validate import Fleet

# how the CLI says a destroy stopped at a protected resource (tests/test_cli_contract.py holds it to the real CLI)
PROTECTED = ("because it is protected", "marked for protection")
LOAD_BALANCER_WAIT = 600.0  # seconds for the cloud to delete a destroyed cluster's load balancers
# how pulumi-kubernetes says a cluster's API server did not answer (a delete, or a read, of one of its objects)
UNREACHABLE = ("cluster is unreachable", "unreachable cluster")
# the provider's own switch: an object of a cluster it cannot reach leaves the state instead of failing the delete
DELETE_UNREACHABLE = "PULUMI_K8S_DELETE_UNREACHABLE"
KUBERNETES_PROVIDER = "pulumi:providers:kubernetes"


def open_backend(backend: str, root: Path) -> None:
    """The CLI's DIY backend refuses a `file://` folder that does not exist (pulumi/pulumi#15841): the default one,
    under the state folder, is this project's to create; a folder the user named must be there already."""
    if not backend.startswith("file://"):
        return
    folder = Path(os.path.expanduser(backend.removeprefix("file://")))
    if folder.resolve() == (root / "backend").resolve():
        folder.mkdir(parents=True, exist_ok=True)
    elif not folder.is_dir():
        raise AutomationError(f"the backend folder {folder} does not exist: create it (mkdir -p {folder}) or give "
                              "another --backend")


def program_sources(spec: StackSpec) -> frozenset[str]:
    """The clouds whose SDK modules a stack's program uses besides Kubernetes': a platform stack's cluster's (any,
    for one of a cluster no longer in the fleet, run from its record); none for every other stack."""
    from components import lazy_modules

    if isinstance(spec.payload, PlatformPayload):
        return frozenset({spec.payload.cluster.source})
    return frozenset(lazy_modules.BY_SOURCE) if spec.kind == "platform" else frozenset()


class PulumiRunner:
    def __init__(self, root: Path, fleet: Fleet, backend: str | None = None, pulumi_command=None, parallel: int = 2,
                 kubeconfigs: dict[str, str] | None = None, unprotect: bool = False, refresh: bool = False,
                 fleet_name: str | None = None, config: dict[str, str] | None = None,
                 forget: frozenset[str] = frozenset()):
        from pulumi import automation as auto

        self.auto = auto
        self.root = Path(root)
        self.fleet = fleet
        self.backend = backend or default_backend(self.root)
        open_backend(self.backend, self.root)
        if pulumi_command is None:
            if cli_missing():
                raise CLIMissing(CLI_MISSING)
            pulumi_command = started_cli(lambda: interruptible_command(auto))
        self.command = pulumi_command
        self.parallel = parallel
        self.kubeconfigs = dict(kubeconfigs or {})  # Existing cluster -> kubeconfig file (read by the program)
        self.unprotect = unprotect  # destroying a platform stack first lifts its deletion protection
        self.refresh = refresh  # `up --refresh`: read the clouds' state before updating
        self.fleet_name = fleet_name  # `--fleet`: stacks are <fleet>_<stack> in the backend
        self.config = dict(config or {})  # `--config`, `--config-file`: settings for the platform programs
        self.forget = frozenset(forget)  # `up --forget`: clusters that left the fleet whose API server is gone
        self._stacks: dict[str, tuple[str, Any]] = {}  # name -> (the spec's fingerprint, its automation.Stack)
        self._lock = threading.Lock()
        self._modules_lock = threading.Lock()
        self._sources_loaded: set[str | None] = set()

    # ---- construction (checked in tests without running an engine) ----------------------------

    def workspace_options(self, spec, project: str | None = None):
        auto = self.auto
        work_dir = self.root / "stacks" / backend_name(spec.id, self.fleet_name)
        work_dir.mkdir(parents=True, exist_ok=True)
        project = project or project_of(spec.kind)
        env = {"PULUMI_BACKEND_URL": self.backend, "PULUMI_SKIP_UPDATE_CHECK": "true"}
        for name in ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE", "PULUMI_ACCESS_TOKEN"):
            if os.environ.get(name):
                env[name] = os.environ[name]
        return auto.LocalWorkspaceOptions(
            work_dir=str(work_dir),
            project_settings=auto.ProjectSettings(name=project, runtime="python",
                                                  backend=auto.ProjectBackend(url=self.backend),
                                                  description="modelplane: a fleet control plane for LLM inference"),
            secrets_provider=None if is_pulumi_cloud(self.backend) else "passphrase",
            env_vars=env,
            pulumi_command=self.command,
        )

    def stack(self, spec):
        auto = self.auto
        with self._lock:  # a spec of another fingerprint (an `up`'s second pass) gets its own program
            known = self._stacks.get(spec.name)
            if known is not None and known[0] == spec.fingerprint:
                return known[1]
        try:
            stack = auto.create_or_select_stack(stack_name=backend_name(spec.id, self.fleet_name),
                                                project_name=project_of(spec.kind),
                                                program=program_for(spec, self.fleet, None, self.fleet_name),
                                                opts=self.workspace_options(spec))
            plain = dict(stack_config(spec, self.config))
            cluster = plain.get("modelplane:cluster")
            if spec.kind == "platform" and cluster in self.kubeconfigs:
                plain["modelplane:kubeconfigFile"] = self.kubeconfigs[cluster]  # a path: the value is never on argv
            on = cluster if spec.kind == "platform" else spec.host if spec.kind == "gateway" else None
            standins = self.local_chart_sources(on)
            if standins and "modelplane:chartSources" not in plain:
                plain["modelplane:chartSources"] = standins
            config = {k: auto.ConfigValue(value=v) for k, v in plain.items()}  # plain only: argv is visible to all
            if config:
                stack.set_all_config(config)
        except auto.errors.CommandError as exc:
            raise StackBusy(first_error(exc)) if isinstance(exc, auto.ConcurrentUpdateError) else exc
        with self._lock:
            self._stacks[spec.name] = (spec.fingerprint, stack)
        return stack

    def local_chart_sources(self, cluster: str | None) -> str | None:
        """The local fleet's stand-in charts (JSON chart sources), for a cluster the local fleet runs: its
        kubeconfig is the one `modelplane local up` wrote (docs/local-fleet.md). None for any other cluster."""
        local = self.root.resolve() / "local"
        path = self.kubeconfigs.get(cluster or "")
        sources = local / "chart-sources.json"
        if path is None or Path(path).parent != local / str(cluster) or not sources.is_file():
            return None
        return sources.read_text()

    # ---- the StackRunner interface ---------------------------------------------------------------

    def _load_modules(self, spec: StackSpec) -> None:
        """Before a stack's program runs in its thread: the provider SDKs' lazy submodules it uses are loaded here,
        one thread at a time (they are not safe to load from two at once, components/lazy_modules.py), and only
        the clouds of the stacks that run (each costs about a second). A platform stack's program uses its
        cluster's cloud; one of a cluster no longer in the fleet (run from its record) may use any."""
        from components import lazy_modules

        sources = program_sources(spec)
        with self._modules_lock:
            if sources | {None} <= self._sources_loaded:
                return
            lazy_modules.load(sources)  # Kubernetes' always
            self._sources_loaded |= {None, *sources}

    def run(self, operation: Operation, spec: StackSpec, on_event: EventSink) -> RunResult:
        auto = self.auto
        self._load_modules(spec)

        def forward(event) -> None:
            pre = getattr(event, "resource_pre_event", None)
            if pre is not None and pre.metadata is not None:
                on_event({"stack": spec.name, "type": "resource", "op": str(pre.metadata.op.value if hasattr(pre.metadata.op, "value") else pre.metadata.op),
                          "urn": pre.metadata.urn, "resourceType": pre.metadata.type})
            diag = getattr(event, "diagnostic_event", None)
            if diag is not None and diag.severity in ("error", "warning") \
                    and not registered_provider_warning((diag.message or "").strip()):
                on_event({"stack": spec.name, "type": "diagnostic", "severity": diag.severity,
                          "message": (diag.message or "").strip()[:500]})

        for attempt in range(2):  # a second time only once stale locks were released
            try:
                stack = self.stack(spec)
                forgetting = operation in ("up", "destroy") and self.forgetting(stack)
                if operation == "preview":
                    result = stack.preview(on_event=forward, parallel=self.parallel, color="never")
                    return RunResult(spec.name, operation, True, _counts(result.change_summary))
                if operation == "preview-destroy":
                    result = stack.preview_destroy(on_event=forward, color="never")
                    return RunResult(spec.name, operation, True, _counts(result.change_summary))
                if operation == "up":
                    began = utc_now()
                    marker = load_balancers.drained_marker(self.root, spec.name)
                    drained = marker.is_file()  # a failed destroy deleted its Gateways: the state still has them
                    result = stack.up(on_event=forward, parallel=self.parallel, color="never",
                                      refresh=(self.refresh or drained) or None)
                    marker.unlink(missing_ok=True)
                    return RunResult(spec.name, operation, True, _counts(result.summary.resource_changes),
                                     _plain(result.outputs), window=UpdateWindow.of(result.summary, began, utc_now()))
                if operation == "destroy":
                    if self.unprotect and spec.kind == "platform":
                        self.lift_protection(stack, spec, forward)
                    gateways: list[str] = []
                    if spec.kind == "platform" and not self.protected:  # a protected cluster stays: so do its LBs
                        left = self.drain_load_balancers(stack, spec, on_event, gateways)
                        if left:
                            return RunResult(spec.name, operation, False, error=(
                                f"the cloud has not deleted the load balancers of {', '.join(left)} in "
                                f"{LOAD_BALANCER_WAIT:.0f} s: destroying the cluster now would leave them behind, holding "
                                "its network; nothing was destroyed, run the destroy again (or delete them by hand)"))
                    try:
                        result = stack.destroy(on_event=forward, color="never")
                    except auto.errors.CommandError as exc:
                        if forgetting and any(why in str(exc) for why in UNREACHABLE):
                            return self.forgotten(stack, spec, first_error(exc))
                        if gateways:
                            marker = load_balancers.drained_marker(self.root, spec.name)
                            marker.parent.mkdir(parents=True, exist_ok=True)
                            marker.write_text("\n".join(gateways) + "\n")
                        raise
                    except Exception:
                        if gateways:
                            marker = load_balancers.drained_marker(self.root, spec.name)
                            marker.parent.mkdir(parents=True, exist_ok=True)
                            marker.write_text("\n".join(gateways) + "\n")
                        raise
                    load_balancers.drained_marker(self.root, spec.name).unlink(missing_ok=True)
                    # the stack leaves the backend with its resources: a destroyed stack kept there (no resources, no
                    # record) read as recorded, and every later `up --prune` destroyed it again (the real engine showed it)
                    stack.workspace.remove_stack(stack.name)
                    with self._lock:
                        self._stacks.pop(spec.name, None)
                    return RunResult(spec.name, operation, True, _counts(result.summary.resource_changes))
                if operation == "preview-refresh":  # drift: what a refresh would change, changing nothing
                    drift = stack.preview_refresh(on_event=forward, color="never")
                    return RunResult(spec.name, operation, True, _counts(drift.change_summary))
                if operation == "refresh":
                    result = stack.refresh(on_event=forward, color="never")
                    return RunResult(spec.name, operation, True, _counts(result.summary.resource_changes))
                raise ValueError(f"unknown operation {operation}")
            except auto.ConcurrentUpdateError as exc:
                if attempt == 0 and self.released_stale_locks(exc, spec, on_event):
                    continue  # its holder was killed: the stack is free, run it now
                return RunResult(spec.name, operation, False,
                                 error=f"stack {spec.name} is locked by another update (another `modelplane up`, "
                                       "or a crashed one: run `pulumi cancel` in its workspace to release it)")
            except auto.errors.CommandError as exc:
                error = first_error(exc)
                # the CLI's first error line names the resource ("... cannot be deleted"); why follows on the next one
                # ("because it is protected"; before 3.1xx "as it is currently marked for protection")
                if operation == "destroy" and any(why in str(exc) for why in PROTECTED):
                    error = (f"{spec.name} holds protected resources (clusters and networks are never deleted by accident): "
                             "run `modelplane destroy --unprotect` to lift the protection and destroy it")
                if operation == "destroy" and "DependencyViolation" in error:
                    error += (" (a load balancer or network interface the cluster's Services made outlived it: delete "
                              "it in the cloud, e.g. the ELBs tagged kubernetes.io/cluster/<name>, then destroy again)")
                unreachable = any(why in str(exc) for why in UNREACHABLE)
                if unreachable:
                    error = f"the API server of a cluster it has objects on does not answer ({error})"
                return RunResult(spec.name, operation, False, error=error, unreachable=unreachable)
            except CLIMissing:
                raise
            except Exception as exc:  # the program itself failed (invalid input reaches here as RunError)
                return RunResult(spec.name, operation, False, error=f"{type(exc).__name__}: {exc}")
        raise AssertionError("unreachable: the second attempt returns")

    def released_stale_locks(self, exc: Exception, spec: StackSpec, on_event: EventSink) -> bool:
        """The stack's locks, when every one was left by a `pulumi` process of this machine that no longer runs
        (killed mid-update: automation/execution/stale_locks.py), are released, and the run says so. Without it the
        stack stayed locked until someone ran `pulumi cancel` by hand (the real engine showed it)."""
        from automation.execution.stale_locks import release_stale

        removed = release_stale(str(exc), self.backend)
        if removed:
            on_event({"stack": spec.name, "type": "diagnostic", "severity": "warning",
                      "message": f"released {len(removed)} lock(s) of {spec.name} left by a killed update of this "
                                 "machine (its process no longer runs)"})
        return bool(removed)

    def _state(self, stack) -> dict:
        """The stack's checkpoint (no --show-secrets: secrets stay ciphertext)."""
        workspace = stack.workspace
        return json.loads(workspace.pulumi_command.run(["stack", "export", "--stack", stack.name], workspace.work_dir,
                                                       workspace.env_vars).stdout or "{}")

    def forgetting(self, stack) -> bool:
        """`up --forget`: does this stack have objects on a forgotten cluster (a Kubernetes provider of it in its
        state)? Then its operations run with the provider's DELETE_UNREACHABLE: an object of a cluster that does
        not answer leaves the state instead of failing the run. Only these stacks: on any other, an unreachable
        cluster (a network partition) still fails the delete, as pulumi-kubernetes intends."""
        if not self.forget:
            return False
        resources = (self._state(stack).get("deployment") or {}).get("resources") or []
        clusters = {str((r.get("inputs") or {}).get("clusterIdentifier")) for r in resources
                    if r.get("type") == KUBERNETES_PROVIDER}
        if not clusters & self.forget:
            return False
        stack.workspace.env_vars[DELETE_UNREACHABLE] = "true"
        return True

    def forgotten(self, stack, spec: StackSpec, why: str) -> RunResult:
        """A stack of a forgotten cluster whose destroy stopped at an object the provider will not drop: a Helm
        release (pulumi-kubernetes 4.25 to this day deletes a release only from a reachable cluster,
        pulumi-kubernetes#2675). When what is left is on that cluster (its Kubernetes objects; providers, stack
        references and components hold nothing anywhere), the stack leaves the backend as it is, deleting nothing.
        Anything else left (a cloud cluster, a network) must still be destroyed: then it stays, and the error says
        how."""
        resources = (self._state(stack).get("deployment") or {}).get("resources") or []
        elsewhere = sorted({r["type"] for r in resources if r.get("custom") and not r["type"].startswith(
            ("kubernetes:", "pulumi:providers:")) and r["type"] != "pulumi:pulumi:StackReference"})
        if elsewhere:
            import shlex

            releases = [r["urn"] for r in resources if r["type"] == "kubernetes:helm.sh/v3:Release"]
            where = f"cd {shlex.quote(stack.workspace.work_dir)} && PULUMI_BACKEND_URL={shlex.quote(self.backend)}"
            return RunResult(spec.name, "destroy", False, unreachable=True, error=(
                f"{why}; it still holds {', '.join(elsewhere)}, which only a destroy removes: drop its Helm releases "
                "from the state (" + "; ".join(f"{where} pulumi state delete --yes --target-dependents --stack "
                                               f"{stack.name} {shlex.quote(urn)}" for urn in releases)
                + "), then run again"))
        stack.workspace.remove_stack(stack.name, force=True)
        with self._lock:
            self._stacks.pop(spec.name, None)
        return RunResult(spec.name, "destroy", True, summary=(
            f"forgotten: its cluster does not answer; {sum(1 for r in resources if r['type'].startswith('kubernetes:'))}"
            " object(s) left on it, none deleted"))

    @property
    def protected(self) -> bool:
        """Would a destroy keep the clusters (their protection is on)? Then it fails, and must change nothing."""
        given = str(self.config.get("modelplane:deletionProtection", "true")).lower()
        return not self.unprotect and given != "false"

    def drain_load_balancers(self, stack, spec: StackSpec, on_event: EventSink,
                             gateways: list[str] | None = None) -> list[str]:
        """Before a provisioned cluster's platform stack is destroyed, have the cloud delete the load balancers
        its Services made (automation/execution/load_balancers.py); returns the Services still there. A cluster this
        machine cannot reach is destroyed anyway, with a warning: draining is then the user's."""
        from automation.execution.kube import KubeClient

        outputs = stack.outputs()
        recorded = (outputs.get("clusterArgs").value or {}).get("args") if outputs.get("clusterArgs") else None
        source = spec.payload.cluster.source if isinstance(spec.payload, PlatformPayload) else \
            (recorded or {}).get("source")
        kubeconfig = outputs.get("kubeconfig")
        if source in (None, "Existing") or kubeconfig is None or not kubeconfig.value:
            return []  # an existing cluster stays, with its load balancers; a stack never applied has none

        def say(line: str, severity: str = "info") -> None:
            on_event({"stack": spec.name, "type": "diagnostic", "severity": severity, "message": line})

        with tempfile.TemporaryDirectory(prefix="modelplane-") as private:  # 0700: the kubeconfig is a credential
            path = Path(private) / "kubeconfig"
            path.touch(mode=0o600)
            path.write_text(str(kubeconfig.value))
            try:
                api = KubeClient(path, cluster=f"cluster {spec.id.cluster}")
                return load_balancers.drain(api, LOAD_BALANCER_WAIT, say=say, deleted=gateways)
            except AutomationError as exc:
                say(f"could not delete the cluster's load balancers before destroying it ({exc}); any the cloud "
                    "made for its Services may be left behind and hold its network", "warning")
                return []

    def lift_protection(self, stack, spec: StackSpec, forward) -> None:
        """Protected clusters and networks (and GKE's own deletion protection), lifted without running the cluster's
        Kubernetes objects again: a cluster whose API server is gone must still be destroyable. An Existing cluster
        has nothing of ours protected: nothing to lift. A provisioned one: every protect flag cleared in the state
        (`pulumi state unprotect --all`), then an update targeted at the resources whose cloud keeps a deletion
        protection of its own (an input `deletionProtection: true`), with the config turning it off. A cluster
        still in the fleet runs its program for that; one that left it runs from the `clusterArgs` its stack
        recorded, since the fleet no longer describes it. The target leaves every other resource as it is."""
        auto = self.auto
        outputs = None
        if isinstance(spec.payload, PlatformPayload):
            source: str | None = spec.payload.cluster.source
        else:  # a cluster no longer in the fleet
            outputs = stack.outputs()
            recorded = outputs.get("clusterArgs")
            if recorded is None:
                if not outputs:
                    return  # never applied: nothing to lift
                raise AutomationError(f"{spec.name} recorded no clusterArgs (applied by an older modelplane): add "
                                      f"InferenceCluster/{spec.id.cluster} back to the manifests and run `modelplane "
                                      "destroy --unprotect` for it")
            source = (recorded.value.get("args") or {}).get("source")
        if source == "Existing":
            return  # an existing cluster: this project created nothing there that is protected
        name = backend_name(spec.id, self.fleet_name)
        workspace = stack.workspace
        workspace.pulumi_command.run(["state", "unprotect", "--all", "--yes", "--stack", name], workspace.work_dir,
                                     workspace.env_vars)
        # no --show-secrets: the inputs read here are plain, and secrets stay ciphertext in memory
        state = json.loads(workspace.pulumi_command.run(["stack", "export", "--stack", name], workspace.work_dir,
                                                        workspace.env_vars).stdout or "{}")
        guarded = [r["urn"] for r in (state.get("deployment") or {}).get("resources") or []
                   if (r.get("inputs") or {}).get("deletionProtection") is True]
        if not guarded:
            return
        if outputs is not None:
            from components.platform import recorded_cluster

            before = outputs.get(RECORD_OUTPUT)
            args = outputs["clusterArgs"].value

            def lift() -> None:
                recorded_cluster(args)
                if before is not None:  # the stack is still what it applied, until its destroy succeeds
                    pulumi.export(RECORD_OUTPUT, before.value)

            stack.workspace.program = lift
        stack.set_config("modelplane:deletionProtection", auto.ConfigValue(value="false"))
        stack.up(on_event=forward, parallel=self.parallel, color="never", target=guarded)

    def rename(self, old: StackId, new: StackId, kind_spec: StackSpec | None = None) -> None:
        """Rename a stack in the backend, and move its workspace folder (its config and encryption salt)."""
        auto = self.auto
        spec = kind_spec or StackSpec.for_deletion(old)
        old_name, new_name = backend_name(old, self.fleet_name), backend_name(new, self.fleet_name)
        old_dir, new_dir = self.root / "stacks" / old_name, self.root / "stacks" / new_name
        try:
            stack = auto.select_stack(stack_name=old_name, project_name=project_of(old.kind),
                                      program=lambda: None, opts=self.workspace_options(spec))
            stack.rename(new_name)
        except auto.errors.CommandError as exc:
            raise AutomationError(f"could not rename stack {old} to {new}: {first_error(exc)}") from None
        if old_dir.exists() and not new_dir.exists():
            old_dir.rename(new_dir)
        with self._lock:
            self._stacks.pop(str(old), None)

    def move_project(self, stack: StackId, organization: str) -> None:
        """Move a platform stack made in the old project into `modelplane` (automation/projects.py): a rename to its
        fully qualified name in the new project, which rewrites its resources' URNs; nothing is replaced."""
        auto = self.auto
        name = backend_name(stack, self.fleet_name)
        try:
            old = auto.select_stack(stack_name=name, project_name=LEGACY_PLATFORM_PROJECT, program=lambda: None,
                                    opts=self.workspace_options(StackSpec.for_deletion(stack), LEGACY_PLATFORM_PROJECT))
            # the command itself: Stack.rename reads the stack's history afterwards, by a name of another project
            old.workspace.pulumi_command.run(["stack", "rename", f"{organization}/{PLATFORM_PROJECT}/{name}",
                                              "--stack", name, "--non-interactive"], old.workspace.work_dir,
                                             old.workspace.env_vars)
        except auto.errors.CommandError as exc:
            raise AutomationError(f"could not move stack {stack} from the Pulumi project {LEGACY_PLATFORM_PROJECT} "
                                  f"into {PLATFORM_PROJECT}: {first_error(exc)}") from None
        with self._lock:
            self._stacks.pop(str(stack), None)

    def cancel(self, stack_name: str) -> None:
        """Stop a running operation cleanly: SIGINT to its `pulumi` process, which it waits for (never a kill)."""
        interrupt = getattr(self.command, "interrupt", None)
        if interrupt is not None:  # also between two of its processes: the next one never starts
            interrupt(backend_name(stack_name, self.fleet_name))
            return
        known = self._stacks.get(stack_name)
        stack = known[1] if known is not None else None
        if stack is not None:  # a command we cannot signal: ask the backend (on Pulumi Cloud this stops the update)
            try:
                stack.cancel()
            except Exception:
                pass


def _counts(summary) -> dict[str, int]:
    return {str(k.value if hasattr(k, "value") else k): int(v) for k, v in (summary or {}).items()}


def _plain(outputs) -> dict:
    """Stack outputs without secrets: only these are stored in the state file."""
    return {k: v.value for k, v in (outputs or {}).items() if not v.secret}
