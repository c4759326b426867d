"""The one narrow interface between orchestration and Pulumi: run one operation on one stack.

`automation/execution/pulumi_runner.py` implements it with Pulumi's automation API; tests use a
recording fake. Everything above it (which stacks, which order, what to record) is plain
Python that never imports pulumi.automation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol, runtime_checkable

# the Pulumi CLI's errors live below the record (which reads the backend through the CLI); named here too for the
# modules above that import them from the runner
from automation.errors import INSTALL_HINT as INSTALL_HINT, AutomationError as AutomationError, \
    CLIMissing as CLIMissing, first_error as first_error, started_cli as started_cli
from automation.planning.stacks import StackSpec
from automation.record.applied import UpdateWindow
from fleet.stack_id import StackId

Operation = Literal["preview", "preview-destroy", "up", "destroy", "refresh", "preview-refresh"]
EventSink = Callable[[dict[str, Any]], None]  # one engine event, as plain data: {"stack", "type", ...}


@dataclass
class RunResult:
    stack: str
    operation: Operation
    ok: bool
    changes: dict[str, int] = field(default_factory=dict)  # operation type -> count (create, update, same, ...)
    outputs: dict = field(default_factory=dict)  # plain (non-secret) stack outputs
    error: str | None = None
    summary: str | None = None  # what happened, when there are no per-resource counts (the operator executor)
    window: UpdateWindow | None = None  # when an `up` ran, as the backend stamps it (the local executor)
    unreachable: bool = False  # failed because a cluster it has objects on does not answer (its API server is gone)


class StackBusy(AutomationError):
    pass


class StackRunner(Protocol):
    def run(self, operation: Operation, stack: StackSpec, on_event: EventSink) -> RunResult:
        """Run `operation` on the stack; never raises for a failed update, only reports it.

        A stack to destroy that is no longer desired is `StackSpec.for_deletion(id)`: its program never runs."""
        ...

    def cancel(self, stack_name: str) -> None:
        """Ask a running operation on the stack to stop cleanly (Pulumi cancels at a safe point)."""
        ...


@runtime_checkable
class Migrating(StackRunner, Protocol):
    """A runner whose executor migrates old stack names (automation/road/executor.py `Capabilities.rename`)."""

    def rename(self, old: StackId, new: StackId) -> None:
        """Rename a stack in the backend (a migration of stack names); raises AutomationError on failure."""
        ...

    def move_project(self, stack: StackId, organization: str) -> None:
        """Move a platform stack of the old project into the one project (automation/projects.py)."""
        ...
