"""A problem found in a user's manifests, printed as FILE:LINE: Kind/name: field: message."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    source: str
    line: int
    object: str  # "Kind/name", or "" when the problem is not inside one object
    path: str  # dotted field path such as spec.template.spec.engines[0].name, or ""
    message: str
    warning: bool = False

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        parts = [where]
        if self.object:
            parts.append(self.object)
        if self.path:
            parts.append(self.path)
        message = f"warning: {self.message}" if self.warning else self.message
        line = ": ".join(parts + [message])
        return line if line.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


def format_path(path: tuple) -> str:
    """('spec', 'engines', 0, 'name') -> 'spec.engines[0].name'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not str(part).isprintable():  # keep one problem on one line
            out += f"[{str(part)!r}]"
        elif "." in str(part) or "/" in str(part):  # a map key such as a label: labels[modelplane.ai/x]
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
