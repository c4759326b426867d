"""One way to open an executor, for the CLI and the portal's worker alike: the record it writes, what it can do
(`Capabilities`, automation/execution/capabilities.py) and its runner.

The local executor runs each stack's Pulumi engine on this host (automation/execution/pulumi_runner.py); the operator
executor hands each stack to the Pulumi Kubernetes Operator as a Stack object (automation/operator/runner.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, Mapping

from automation.execution.capabilities import LOCAL, OPERATOR, READY, Capabilities
from automation.execution.runner import AutomationError, StackRunner

if TYPE_CHECKING:
    from automation.execution.kube import KubeClient
    from automation.operator.export import ExportOptions
    from automation.operator.settings import OperatorSettings
    from automation.record.applied import Record
    from automation.record.backend import PulumiRecord
    from fleet.validate import Fleet

ExecutorKind = Literal["local", "operator"]


@dataclass(frozen=True)
class ExecutorOptions:
    """What a command (or the portal) asks of its executor."""

    kind: ExecutorKind = "local"
    state: Path = Path(".modelplane")  # the state folder: workspaces, caches, the lock
    backend: str | None = None  # the local executor's backend URL (else the state folder's)
    parallel: int = 2
    kubeconfigs: Mapping[str, str] = field(default_factory=dict)  # `--kubeconfig CLUSTER=PATH`
    unprotect: bool = False  # a destroy lifts the clusters' deletion protection
    refresh: bool = False  # `up --refresh`
    fleet_name: str | None = None  # `--fleet`
    config: Mapping[str, str] | None = None  # `--config`, `--config-file`
    forget: frozenset[str] = frozenset()  # `up --forget`
    force: frozenset[str] = frozenset()  # `up --force`
    operator_settings: str | Path = "modelplane-operator.yaml"
    paths: tuple[str, ...] = ()  # the manifests planned from (the operator runs gitRef's commit: they must be it)


class Executor:
    """An opened executor: the record it writes (read before planning), what it can do, and its runner, made on
    first ask (the local one starts the Pulumi CLI: a first run says everything it needs, the CLI among it, first)."""

    def __init__(self, record: Record, capabilities: Capabilities, make_runner: Callable[[], StackRunner],
                 options: ExecutorOptions | None = None):
        self.record = record
        self.capabilities = capabilities
        self.options = options or ExecutorOptions()
        self._make_runner = make_runner
        self._runner: StackRunner | None = None

    @classmethod
    def ready(cls, runner: StackRunner, record: Record, capabilities: Capabilities = READY) -> Executor:
        return cls(record, capabilities, lambda: runner)

    def runner(self) -> StackRunner:
        if self._runner is None:
            self._runner = self._make_runner()
        return self._runner


def open_executor(options: ExecutorOptions, fleet: Fleet) -> Executor:
    """The executor `options` ask for, on this fleet. Raises AutomationError (CLIMissing: the Pulumi CLI cannot
    run) saying why it cannot be opened: the operator's settings, its cluster, or manifests that are not the
    commit it runs; the local runner, once asked for, the backend folder, the CLI and the passphrase."""
    if options.kind == "operator":
        return _operator(options)
    return _local(options, fleet)


def open_record(options: ExecutorOptions, strict: bool = True) -> Record:
    """The executor's record alone, for what reads it without running a stack (`plan`, `status`, `preview`):
    the record `open_executor` gives, from the same place. `strict`: see PulumiRecord. Raises AutomationError."""
    if options.kind == "operator":
        from automation.operator.runner import OperatorRecord

        _, api, export = operator_client(options)
        return OperatorRecord(api, export)
    return _pulumi_record(options, strict)


def _pulumi_record(options: ExecutorOptions, strict: bool) -> PulumiRecord:
    from automation.record.backend import PulumiRecord

    return PulumiRecord(Path(options.state), options.backend, options.fleet_name, strict=strict)


def operator_client(options: ExecutorOptions) -> tuple[OperatorSettings, KubeClient, ExportOptions]:
    """The operator's settings, a client of its control-plane cluster (checked reachable) and the export options.
    Raises AutomationError."""
    from automation.execution.kube import KubeClient
    from automation.operator.runner import check_reachable
    from automation.operator.settings import load_settings

    settings = load_settings(options.operator_settings)
    export = settings.export_options(options.fleet_name)
    api = KubeClient(settings.kubeconfig_path(), settings.context)
    check_reachable(api, export)
    return settings, api, export


def _local(options: ExecutorOptions, fleet: Fleet) -> Executor:
    from automation.execution.prerequisites import check_passphrase, existing_kubeconfigs
    from automation.execution.pulumi_runner import PulumiRunner

    state = Path(options.state)
    record = _pulumi_record(options, strict=True)

    def make() -> StackRunner:
        runner = PulumiRunner(state, fleet, backend=options.backend, parallel=options.parallel,  # says if no CLI
                              kubeconfigs=existing_kubeconfigs(fleet, dict(options.kubeconfigs), state),
                              unprotect=options.unprotect, refresh=options.refresh, fleet_name=options.fleet_name,
                              config=dict(options.config or {}), forget=options.forget)
        check_passphrase(runner.backend)
        record.command = record.command or runner.command  # the record reads through the same CLI
        return runner
    return Executor(record, LOCAL, make, options)


def _operator(options: ExecutorOptions) -> Executor:
    from automation.operator import git_source
    from automation.operator.runner import OperatorRecord, OperatorRunner

    settings, api, export = operator_client(options)
    for path in options.paths:  # the operator's workspaces run gitRef's commit, not this tree
        problem = ("the manifests come from stdin, which no commit holds" if path == "-"
                   else git_source.local_tree_problem(export.git_ref, path, settings.repo_dir))
        if problem:
            raise AutomationError(problem)
    return Executor(OperatorRecord(api, export), OPERATOR, lambda: OperatorRunner(
        api, export, force=set(options.force), unprotect=options.unprotect, poll=settings.poll_seconds,
        timeout=settings.timeout_minutes * 60), options)
