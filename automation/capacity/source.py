"""Where a command's capacity comes from: `--capacity declared` (the manifests alone, the default), `live` (read
from every cluster that can be reached: read.py) or a snapshot file a job saved (`modelplane capacity save`)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from automation.errors import AutomationError
from fleet.capacity import LiveCapacity
from fleet.validate import Fleet

DECLARED, LIVE = "declared", "live"


def capacity_of(fleet: Fleet, source: str, kubeconfigs: Mapping[str, str], root: Path) -> LiveCapacity | None:
    """The capacity `source` names for `fleet` (None: declared). A snapshot that cannot be read is an
    AutomationError naming the file; a cluster that cannot be read live keeps its declared capacity, said in it."""
    if source == DECLARED:
        return None
    if source == LIVE:
        from automation.capacity.read import kube_reader, kubeconfig_paths, read_capacity

        return read_capacity(fleet, kube_reader(kubeconfig_paths(fleet, kubeconfigs, root)))
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as exc:
        raise AutomationError(f"--capacity {source}: cannot read the snapshot ({exc.strerror or type(exc).__name__}); "
                              f"give `declared`, `live`, or a file `modelplane capacity save` wrote") from None
    try:
        snapshot = LiveCapacity.from_json(text)
    except ValueError as exc:
        raise AutomationError(f"--capacity {source}: {exc}") from None
    unknown = sorted(set(snapshot.clusters) - {ic.name for ic in fleet.of("InferenceCluster")})
    if unknown:  # a snapshot of another fleet: its clusters would silently keep declared capacity
        raise AutomationError(f"--capacity {source}: the snapshot has clusters the fleet does not: "
                              f"{', '.join(unknown[:5])}" + (" ..." if len(unknown) > 5 else ""))
    return snapshot
