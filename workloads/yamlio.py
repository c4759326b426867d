"""Plain YAML out: no &anchors, keys in the order objects were built."""

from __future__ import annotations

import yaml


class _NoAliases(yaml.SafeDumper):
    """An object that appears twice is written twice, never as an &anchor (readers and diffs stay simple)."""

    def ignore_aliases(self, data) -> bool:
        return True


def dump(obj) -> str:
    return yaml.dump(obj, Dumper=_NoAliases, sort_keys=False)
