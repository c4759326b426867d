"""`pulumi up` from the repository: the stack `modelplane up` runs under the same name, or the whole fleet.

A stack named as the automation layer names it (`platform-<cluster>`, `gateway`, optionally `<fleet>_` first)
runs the spec `modelplane up` runs for it (automation/planning/stacks.py `platform_specs`), through the same program
(automation/execution/programs.py), so it registers the same resources and writes the same record: one stack, two
doors. Any other stack name runs the whole fleet in one stack (components/platform.py `main`), a laptop sandbox.
"""

from __future__ import annotations

import pulumi

from automation.execution.programs import program_for
from automation.planning.stacks import platform_specs
from components.args import control_plane_cluster
from fleet.plan import dynamo_clusters
from fleet.scheduler import schedule
from fleet.stack_id import StackId, StackIdError, StackKind
from components import platform as program


def automation_stack(name: str) -> tuple[StackId, str | None] | None:
    """The id and the fleet name of a stack named as `modelplane up` names a platform or gateway stack; None for
    any other name (a laptop's whole-fleet stack)."""
    fleet_name, _, rest = name.rpartition("_")
    try:
        id = StackId.parse(rest)
    except StackIdError:
        return None
    return (id, fleet_name or None) if id.kind in (StackKind.platform, StackKind.gateway) else None


def main() -> None:
    config = pulumi.Config("modelplane")
    named = automation_stack(pulumi.get_stack())
    if named is None or config.get("controlPlaneStack"):  # the operator's gateway stack reads its host's stack
        return program.main()
    id, fleet_name = named
    if config.get("cluster") not in (None, "", id.cluster):
        raise program.InvalidFleet(f"stack {pulumi.get_stack()}: modelplane:cluster is {config.get('cluster')!r}; a "
                                   "stack named as `modelplane up` names it runs the cluster its name says (unset "
                                   "the key, or name the stack after that cluster)")
    fleet = program.load(config.require("fleet"))
    try:
        host = control_plane_cluster(fleet, config.get("controlPlaneCluster") or None)
    except ValueError as exc:
        raise program.InvalidFleet(f"modelplane:controlPlaneCluster: {exc}") from None
    # the Dynamo platform where the fleet's plan places Dynamo replicas (the record's placements are modelplane's)
    spec = platform_specs(fleet, host, dynamo=dynamo_clusters(schedule(fleet))).get(str(id))
    if spec is None:
        raise program.InvalidFleet(f"stack {pulumi.get_stack()}: {id} is not a stack of this fleet (no such "
                                   "InferenceCluster, or no InferenceGateway for the gateway stack)")
    program_for(spec, fleet, None, fleet_name)()
