"""What each executor can do, as data: refused before anything runs (`Capabilities.refusal`), in the words the
user reads, rather than found by a runner half-way through (automation/road/executor.py opens them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from automation.execution.runner import Operation
    from fleet.stack_id import StackId


LOCAL_FIRST = "with the local executor first (`modelplane up` without --executor operator)"


@dataclass(frozen=True)
class Capabilities:
    """What an executor can do. Where it cannot, `why` says so in the words the user reads (keyed by field)."""

    name: str
    refresh: bool  # `refresh`, `drift` and `up --refresh`
    rename: bool  # stacks recorded under old names, or in the old Pulumi project, are migrated in its backend
    forget: bool  # `up --forget`: the stacks of a cluster gone with its API server leave the backend
    kubeconfig_files: bool  # Existing clusters' kubeconfigs are files of this host (`--kubeconfig CLUSTER=PATH`)
    backend_url: bool  # `--backend` chooses where its record is
    max_parallel: int | None  # stacks at once, at most (None: as many as asked)
    default_parallel: int  # stacks at once unless told
    needs_here: bool  # its runs need the Pulumi CLI, the passphrase, kubeconfigs and Secrets' values on this host
    why: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def refusal(self, operation: Operation, *, refresh: bool = False, forget: bool = False, kubeconfig: bool = False,
                backend: bool = False, parallel: int | None = None) -> str | None:
        """Why these options cannot run on this executor, or None."""
        if self.max_parallel is not None and parallel is not None and parallel > self.max_parallel:
            return f"--parallel: at most {self.max_parallel} with the {self.name} executor ({self.why['max_parallel']})"
        asked = {"forget": forget, "refresh": refresh or operation in ("refresh", "preview-refresh"),
                 "kubeconfig_files": kubeconfig, "backend_url": backend}
        return next((self.why[name] for name, wanted in asked.items() if wanted and not getattr(self, name)), None)

    def migration_refusal(self, old: StackId, new: StackId | None = None) -> str | None:
        """Why a stack of an old name (`new`: its name now) or of the old Pulumi project (`new` None) cannot be
        migrated by this executor, or None."""
        if self.rename:
            return None
        if new is None:
            return f"stack {old} is in the old Pulumi project modelplane-platform: move it {LOCAL_FIRST}"
        return f"stack {old} is recorded under a legacy name: rename it to {new} {LOCAL_FIRST}"


LOCAL = Capabilities("local", refresh=True, rename=True, forget=True, kubeconfig_files=True, backend_url=True,
                     max_parallel=16, default_parallel=2, needs_here=True,
                     why={"max_parallel": "each stack runs a Pulumi engine here"})
OPERATOR = Capabilities(
    "operator", refresh=False, rename=False, forget=False, kubeconfig_files=False, backend_url=False,
    max_parallel=None, default_parallel=64, needs_here=False,  # stacks run in the cluster: here, handed over, watched
    why={"forget": "--forget is for the local executor (on the operator, a Stack of a gone cluster is deleted by hand)",
         "refresh": "refresh and drift are not available with --executor operator (the operator refreshes a stack "
                    "whose Stack sets spec.refresh)",
         "kubeconfig_files": "--kubeconfig CLUSTER=PATH is for the local executor: on the operator, an Existing "
                             "cluster's kubeconfig is the Secret named by its existing.secretRef in the stacks' "
                             "namespace",
         "backend_url": "--backend is the local executor's: the operator's is `backend` in the settings file"})
# a runner given ready-made (a test's): it can do everything and needs nothing of this host
READY = Capabilities("given", refresh=True, rename=True, forget=True, kubeconfig_files=True, backend_url=True,
                     max_parallel=None, default_parallel=2, needs_here=False)
CAPABILITIES: dict[str, Capabilities] = {"local": LOCAL, "operator": OPERATOR}
