"""The pull-request comment of a fleet change (`modelplane review`): one text for every outcome, so a pull request
gets its comment exactly when it needs one, a validation failure or a refused stack included.

It says, in this order: whether the manifests validate (each error with its file and line; then nothing else is
said); what the comparison could not know (the record of what is applied unread, or empty); whether the
deployability check of the changed stacks, previewed offline, refuses the change (each failed program first); whether
merging destroys a cluster (the delete of a `platform-<cluster>` stack takes the cluster and its GPU pools with it,
and `modelplane up` does it only with `--prune --yes-destroy-clusters`); what a team policy unscheduled, dropped or
moved; the stack changes and replica moves (`compare.markdown`: a move not checked against the record is listed as
possible); each team's budgets before and after, and each deployment's residency. The first line is a marker, so a
workflow updates its one comment instead of adding one per push.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from automation.planning.compare import Comparison, markdown
from automation.checks.deployability import Findings
from fleet.policy_preview import policy_markdown
from fleet.stack_id import StackId, StackKind

MARKER = "<!-- modelplane-fleet-preview -->"
TITLE = "### modelplane: fleet change preview"
SHOWN = 30  # errors or violations listed; the rest are counted


@dataclass
class Review:
    problems: list[str] = field(default_factory=list)  # the head's validation errors, in file and line order
    base_problems: list[str] = field(default_factory=list)  # the base's (then nothing is compared)
    comparison: Comparison | None = None
    findings: Findings = field(default_factory=Findings)  # the deployability check of the changed stacks
    previewed: int = 0  # stacks previewed offline for the check
    warnings: list[str] = field(default_factory=list)  # said first: what the comparison could not know
    recorded: int | None = None  # replicas read from the record of what is applied (None: none could be read)
    guessed: bool = False  # the record could not be read: a cache stood in
    policies: dict | None = None  # the team policies' budgets before and after, residency (fleet/policy_preview.py)

    @property
    def failed(self) -> bool:
        return bool(self.problems or self.base_problems or len(self.findings))


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


def refused(findings: Findings) -> list[str]:
    """The deployability check's refusal: each failed program first, then the other violations; what follows from
    a failed program is counted in the heading and listed folded under the list."""
    because = "".join(f", {count} of them because `{stack}` cannot run" for stack, count in findings.followed)
    out = [f"**Error: the deployability check refuses {len(findings)} thing(s)**{because}: a real first apply would "
           "fail. Nothing was applied.", "",
           *_listed([f"`{v}`" for v in [cause for cause, _ in findings.causes] + findings.others]), ""]
    for cause, followers in findings.causes:
        if followers:
            out += [f"<details><summary>{len(followers)} violation(s) because {cause.stack} cannot run (what runs "
                    "after it misses what it would create)</summary>", "", *_listed([f"`{v}`" for v in followers]),
                    "", "</details>", ""]
    return out


def comment(review: Review) -> str:
    out = [MARKER, TITLE, ""]
    if review.problems:
        out += [f"**Error: the manifests do not validate** ({len(review.problems)} error(s)); nothing was planned. "
                "Fix these and push again:", "", *_listed([f"`{p}`" for p in review.problems]), ""]
    if review.base_problems:
        out += [f"**Error: the base branch's manifests do not validate** ({len(review.base_problems)} error(s)), so "
                "nothing could be compared:", "", *_listed([f"`{p}`" for p in review.base_problems]), ""]
    if review.comparison is None:
        while out and out[-1] == "":
            out.pop()
        return "\n".join(out) + "\n"
    out += [f"> **Warning:** {w}" for w in review.warnings] + ([""] if review.warnings else [])
    if len(review.findings):  # the refusal leads: the rest of the comment is what would have happened
        out += refused(review.findings)
    for cluster in destroyed_clusters(review.comparison):
        out += [f"> **Warning: merging this destroys cluster `{cluster}`** and its GPU pools (stack "
                f"`platform-{cluster}` is deleted). `modelplane up` does so only with `--prune "
                "--yes-destroy-clusters`; without them it stops and says so.", ""]
    body = markdown(review.comparison, guessed=review.guessed).splitlines()
    if body[:2] == [TITLE, ""]:
        body = body[2:]
    out += [line for line in body if not line.startswith("_Planned offline")]
    while out and out[-1] == "":
        out.pop()
    out += policy_markdown(review.policies).splitlines()
    while out and out[-1] == "":
        out.pop()
    out.append("")
    if not len(review.findings) and review.previewed:
        out += [f"Deployability check: {review.previewed} stack(s) previewed offline (the changed ones and their "
                "neighbours), 0 violations.", ""]
    if review.recorded and not review.guessed:
        out.append(f"_Planned with the record of what is applied ({review.recorded} replica(s)) and previewed "
                   "offline; nothing was applied._")
    else:
        out.append("_Planned and previewed offline from the manifests alone; nothing was applied._")
    return "\n".join(out) + "\n"
