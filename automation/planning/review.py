"""The pull-request comment of a fleet change (`modelplane review`): one text for every outcome, so a pull request
gets its comment exactly when it needs one, a validation failure or a refused stack included.

It says, in this order: whether the manifests validate (each error with its file and line); whether merging
destroys a cluster (the delete of a `platform-<cluster>` stack takes the cluster and its GPU pools with it, and
`modelplane up` does it only with `--prune --yes-destroy-clusters`); the stack changes and replica moves
(`compare.markdown`); and the deployability check of the changed stacks previewed offline. The first line is a
marker, so a workflow updates its one comment instead of adding one per push.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from automation.planning.compare import Comparison, markdown
from fleet.stack_id import StackId, StackKind

MARKER = "<!-- modelplane-fleet-preview -->"
TITLE = "### modelplane: fleet change preview"
SHOWN = 30  # errors or violations listed; the rest are counted


@dataclass
class Review:
    problems: list[str] = field(default_factory=list)  # the head's validation errors, in file and line order
    base_problems: list[str] = field(default_factory=list)  # the base's (then nothing is compared)
    comparison: Comparison | None = None
    violations: list[str] = field(default_factory=list)  # deployability violations of the changed stacks
    previewed: int = 0  # stacks previewed offline for the check
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.problems or self.base_problems or self.violations)


def destroyed_clusters(comparison: Comparison) -> list[str]:
    out = []
    for change in comparison.stacks:
        stack = StackId.parse(change.name)
        if change.change == "delete" and stack.kind == StackKind.platform and stack.cluster:
            out.append(stack.cluster)
    return sorted(out)


def _listed(lines: list[str]) -> list[str]:
    shown = [f"- {line}" for line in lines[:SHOWN]]
    return shown + ([f"- ... and {len(lines) - SHOWN} more"] if len(lines) > SHOWN else [])


def comment(review: Review) -> str:
    out = [MARKER, TITLE, ""]
    if review.problems:
        out += [f"**Error: the manifests do not validate** ({len(review.problems)} error(s)); nothing was planned. "
                "Fix these and push again:", "", *_listed([f"`{p}`" for p in review.problems]), ""]
    if review.base_problems:
        out += [f"**Error: the base branch's manifests do not validate** ({len(review.base_problems)} error(s)), so "
                "nothing could be compared:", "", *_listed([f"`{p}`" for p in review.base_problems]), ""]
    if review.comparison is not None:
        clusters = destroyed_clusters(review.comparison)
        for cluster in clusters:
            out += [f"> **Warning: merging this destroys cluster `{cluster}`** and its GPU pools (stack "
                    f"`platform-{cluster}` is deleted). `modelplane up` does so only with `--prune "
                    "--yes-destroy-clusters`; without them it stops and says so.", ""]
        out += [f"> **Warning:** {w}" for w in review.warnings] + ([""] if review.warnings else [])
        body = markdown(review.comparison).splitlines()
        if body[:2] == [TITLE, ""]:
            body = body[2:]
        out += [line for line in body if not line.startswith("_Planned offline")]
        while out and out[-1] == "":
            out.pop()
        out.append("")
        if review.violations:
            out += [f"**Error: the deployability check refuses {len(review.violations)} thing(s)**: a real first "
                    "apply would fail. Nothing was applied.", "", *_listed([f"`{v}`" for v in review.violations]), ""]
        elif review.previewed:
            out += [f"Deployability check: {review.previewed} stack(s) previewed offline (the changed ones and their "
                    "neighbours), 0 violations.", ""]
    out.append("_Planned and previewed offline from the manifests; nothing was applied._")
    return "\n".join(out) + "\n"
