"""The Pulumi projects the stacks live in: one for what the laptop program also runs, one for workloads.

Platform and gateway stacks are in `modelplane`, the project of the repository's `Pulumi.yaml`: a laptop's
`pulumi up --stack platform-<cluster>`, `modelplane up` on either executor and the portal operate the same
stack. Workload stacks (team, cache, model, endpoints, service) have no laptop program and stay in their
own project. Platform stacks made before this release are in `modelplane-platform`: `up` renames them
into `modelplane` first (`automation/execution/migration.py`).
"""

from __future__ import annotations

from fleet.stack_id import StackKind

PLATFORM_PROJECT = "modelplane"  # the repository's Pulumi.yaml `name:` (tests/test_record.py holds them equal)
WORKLOAD_PROJECT = "modelplane-workloads"
LEGACY_PLATFORM_PROJECT = "modelplane-platform"  # where platform stacks were until this release
PROJECTS = (PLATFORM_PROJECT, WORKLOAD_PROJECT)


def project_of(kind: str) -> str:
    return PLATFORM_PROJECT if kind in (StackKind.platform, StackKind.gateway) else WORKLOAD_PROJECT
