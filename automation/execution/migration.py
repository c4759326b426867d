"""Recorded stacks under the first, ambiguous stack names move to their one-to-one names.

The first encoding named a stack `<kind>-<namespace>-<name>`; fleet/stack_id.py now names it
`<kind>-<namespace>.<name>`. A recorded legacy name is resolved to the object it held by the
objects of the fleet (the legacy name each would have had) or, for a model stack, by its own
recorded placements (namespace and deployment). Each resolved stack is renamed in the Pulumi
backend (its resources keep their one owner, and its record moves with it). A name that
cannot be resolved (its object is gone and nothing recorded says which it was) stays as it is:
it still parses, as a legacy id, and is destroyed under that name when it is pruned.

Platform stacks made before one project held them (`modelplane-platform`) move into `modelplane`
(automation/projects.py) the same way: renamed in the backend, before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TYPE_CHECKING

from automation.record.applied import Applied
from fleet.stack_id import StackId

if TYPE_CHECKING:
    from fleet.validate import Fleet


@dataclass(frozen=True)
class Renamed:
    old: StackId
    new: StackId


def legacy_names(fleet: Fleet) -> dict[str, StackId]:
    """legacy stack name -> the new id, for every workload object of the fleet."""
    out: dict[str, StackId] = {}
    for kind, make in (("ModelDeployment", StackId.model), ("ModelService", StackId.service), ("ModelCache", StackId.cache)):
        for obj in fleet.of(kind):
            new = make(obj.namespace, obj.name)
            legacy = new.legacy_name()
            if legacy is not None:
                out.setdefault(legacy, new)
    return out


def plan_renames(applied: Applied, fleet) -> list[Renamed]:
    """Which recorded stacks are legacy, and what each becomes (unresolvable ones are left out)."""
    known = legacy_names(fleet)
    out = []
    for name, record in sorted(applied.stacks.items()):
        old = StackId.parse(name)
        if old.legacy is None:
            continue
        new = known.get(name)
        if new is None and old.kind == "model" and record.placements:
            first = record.placements[0]
            candidate = StackId.model(first.namespace, first.deployment)
            new = candidate if candidate.legacy_name() == name else None
        if new is not None:
            out.append(Renamed(old, new))
    return out


def migrate(renames: list[Renamed], rename_backend: Callable[[StackId, StackId], None]) -> list[Renamed]:
    """Rename every resolvable legacy stack in the backend; returns what was renamed."""
    done = []
    for item in renames:
        rename_backend(item.old, item.new)
        done.append(item)
    return done
