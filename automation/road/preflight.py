"""The one preflight: every problem that stops a run before anything applies, the same on every road (the CLI's
`up`, `preview`, `refresh`, `drift` and `destroy`, and the portal's worker). Each road says them its own way (the
CLI: by kind, with its exit codes; the worker: in the failed runs' logs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from automation.execution.runner import AutomationError, CLIMissing, Operation
from automation.planning.stacks import Change, DesiredState, StackChange
from fleet.validate import Fleet, gateway_transitions, stack_transitions

if TYPE_CHECKING:
    from automation.road.executor import Executor
    from automation.checks.deployability import Findings
    from automation.record.applied import Applied


@dataclass
class Preflight:
    """What the preflight found, by kind. Invalid objects and changes the record refuses stop it there (what
    follows from them is noise); the add-on check asks the clusters only once the deployability check passed."""

    invalid: list[str] = field(default_factory=list)  # objects the plan refuses
    transitions: list[str] = field(default_factory=list)  # changes the record refuses (immutable once applied)
    findings: Findings | None = None  # the deployability check's
    unserved: list[str] = field(default_factory=list)  # APIs a platform team's cluster does not serve
    needs: list[str] = field(default_factory=list)  # what the executor needs here that is not given

    @property
    def undeployable(self) -> bool:
        return self.findings is not None and len(self.findings) > 0

    def lines(self) -> list[str]:
        """Every problem, one line each: each failed program before what follows from it."""
        found = [str(v) for v, _ in self.findings.ordered()] if self.findings is not None else []
        return [*self.invalid, *self.transitions, *found, *self.unserved, *self.needs]


def preflight(executor: Executor, fleet: Fleet, desired: DesiredState, applied: Applied, items: list[StackChange],
              operation: Operation, check: bool = True, jobs: int | None = None) -> Preflight:
    """Every problem that stops `operation` on `items` before anything applies: invalid objects; for `preview` and
    `up`, changes the record refuses (InferenceCluster spec.stack, InferenceGateway spec.clusterName), the
    deployability check of the stacks about to run and what they meet (unless `check` is off: `--skip-check`) and the
    add-on check of clusters whose platform team manages them; and what the executor needs here that is not given
    (`prerequisites`: the Pulumi CLI, the passphrase, Existing clusters' kubeconfigs, GKE projects, Secrets' values;
    only the passphrase to destroy). `jobs`: previewing processes (1 in a process with threads of its own)."""
    from automation.execution.prerequisites import existing_kubeconfigs
    from automation.checks.deployability import check_changes
    from automation.execution.session import unserved_addons

    if desired.problems:
        return Preflight(invalid=list(desired.problems))
    applying = operation in ("preview", "up")
    if applying and (not items or any(c.change != Change.delete for c in items)):
        transitions = [str(p) for p in [*stack_transitions(fleet, applied.serving_stacks()),
                                        *gateway_transitions(fleet, applied.gateway_clusters())]]
        if transitions:
            return Preflight(transitions=transitions)
    options = executor.options
    refused: list[str] = []
    try:
        files: dict[str, str] | None = existing_kubeconfigs(fleet, options.kubeconfigs, options.state)
    except AutomationError as exc:  # a Secret manifest gives a kubeconfig a file gives too
        files, refused = None, [str(exc)]
    out = Preflight(needs=refused + (_needs(executor, fleet, desired, items, operation, files or {})
                                     if executor.capabilities.needs_here and files is not None else []))
    if applying and items and check:
        out.findings = check_changes(fleet, desired.specs, items, dict(options.config or {}), jobs)
    if applying and items and desired.needs and not out.undeployable and files is not None:
        out.unserved = unserved_addons(fleet, desired.needs, items, files)
    return out


def _needs(executor: Executor, fleet: Fleet, desired: DesiredState, items: list[StackChange], operation: Operation,
           files: dict[str, str]) -> list[str]:
    """What the local executor needs to run `items` that is not here, one line each: the Pulumi CLI first, then the
    passphrase, Existing clusters' kubeconfigs, GKE projects and Secrets' values (`missing_credentials`)."""
    from automation.execution.prerequisites import CLI_MISSING, PASSPHRASE_MISSING, cli_missing, missing_credentials

    options = executor.options
    applying = {c.name: desired.specs[c.name] for c in items
                if c.change in (Change.create, Change.update) and c.name in desired.specs}
    missing = missing_credentials(fleet, options.kubeconfigs, options.state, options.backend, [c.name for c in items],
                                  applying, options.config, found=files)
    if operation == "destroy":  # what is destroyed needs no Secret's value, but its state is encrypted
        missing = [line for line in missing if line == PASSPHRASE_MISSING]
    try:
        no_cli = [CLI_MISSING] if cli_missing() else []
    except CLIMissing as exc:  # the toolchain's CLI, found but unusable
        no_cli = [str(exc)]
    return no_cli + missing
