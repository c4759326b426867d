"""The local executor's record: the Pulumi backend's stacks and their `modelplane` outputs.

Each stack's program exports what its update applied (`automation/record/applied.py`), and the engine keeps it with
the checkpoint of that update, so the record cannot disagree with what the backend holds. Reading it is
`pulumi stack ls --json` per project and `pulumi stack output --json` per stack whose `lastUpdate` differs
from the local cache's (`<state>/record.json`), READERS at a time: on a fresh machine every stack is read once,
after that only what changed. A stack this machine applied is cached with its update's window (`UpdateWindow`):
if the backend's stamp is of that update, the outputs the update returned are the record, and nothing is read. Secret outputs (kubeconfigs) are never asked for: `stack output` without
`--show-secrets` prints them as "[secret]", and those are dropped.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from automation.projects import LEGACY_PLATFORM_PROJECT, PROJECTS
from automation.record.bucket import BucketCheckpoints
from automation.record.index import CheckpointFolder, CheckpointStore, Listed, entry as index_entry
from automation.record.applied import RECORD_OUTPUT, Applied, AppliedStack, RecordCache, UpdateWindow, replica_from_dict
from automation.errors import INSTALL_HINT, AutomationError, first_error, started_cli
from fleet.stack_id import StackId, StackIdError

SECRET = "[secret]"
READERS = 8  # `pulumi stack output` processes at once when many stacks changed since the cache
HISTORY_PAGE = 10  # history entries read at once when a stack's newest entry is a refresh


def default_backend(root: Path) -> str:
    """PULUMI_BACKEND_URL, else a folder backend under the state folder."""
    return os.environ.get("PULUMI_BACKEND_URL") or f"file://{(Path(root) / 'backend').resolve()}"


def checkpoint_store(backend: str) -> CheckpointStore | None:
    """The store of a backend in the project layout that the indexed read can list (a folder, a bucket), else None:
    read through `stack ls`."""
    if backend.startswith("file://"):
        return CheckpointFolder.of(backend)
    return BucketCheckpoints.of(backend)


def history_time(moment: datetime) -> str:
    """A time as the CLI's `stack history --json` writes an update's `endTime` (UTC, whole seconds), so a stack this
    machine applied reads the same `appliedAt` here as on a machine that reads its history."""
    utc = moment.astimezone(timezone.utc) if moment.tzinfo else moment
    return utc.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def ours(backend_stack: str, fleet_name: str | None) -> str | None:
    """The stack name of one of this fleet's stacks in the backend (`<fleet>_<stack>` with --fleet), else None."""
    if fleet_name:
        if not backend_stack.startswith(f"{fleet_name}_"):
            return None
        backend_stack = backend_stack[len(fleet_name) + 1:]
    elif "_" in backend_stack:
        return None  # another fleet's
    try:
        StackId.parse(backend_stack)
    except StackIdError:
        return None  # not ours (a laptop's whole-fleet stack, say)
    return backend_stack


class PulumiRecord:
    """Reads the record from one backend through the Pulumi CLI; `legacy` lists platform stacks still in the old
    project (migrated by `up` before it runs anything)."""

    def __init__(self, root: Path, backend: str | None = None, fleet_name: str | None = None, command: Any = None,
                 strict: bool = True):
        """`strict`: a backend that cannot be read is an error (what applies must never guess); else the cache
        stands in and the result says it guessed (a plan, a CI preview)."""
        from pulumi import automation as auto

        self.auto = auto
        self.root = Path(root)
        self.backend = backend or default_backend(self.root)
        self.strict = strict
        self.fleet_name = fleet_name
        self.command = command
        self.cache = RecordCache(self.root, self.backend)
        self.legacy: dict[str, str] = {}  # stack -> its organization, for platform stacks still in the old project

    def _env(self) -> dict[str, str]:
        env = {"PULUMI_BACKEND_URL": self.backend, "PULUMI_SKIP_UPDATE_CHECK": "true"}
        for name in ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE", "PULUMI_ACCESS_TOKEN"):
            if os.environ.get(name):
                env[name] = os.environ[name]
        return env

    def _workspace(self, project: str):
        auto = self.auto
        work_dir = self.root / "record" / project
        work_dir.mkdir(parents=True, exist_ok=True)
        return auto.LocalWorkspace(work_dir=str(work_dir), env_vars=self._env(), pulumi_command=self.command,
                                   project_settings=auto.ProjectSettings(name=project, runtime="python",
                                                                         backend=auto.ProjectBackend(url=self.backend)))

    def _outputs(self, workspace, backend_stack: str) -> tuple[dict[str, Any], str | None]:
        """The stack's plain outputs as its last update left them, and when that update ended (the newest entry
        of its history; None for a stack never updated); without the record output when that update
        failed: the real engine keeps what a failed program exported (a program that raised after its record
        output resolved left a stack that looked applied), so only a succeeded update is a record."""
        run = workspace.pulumi_command.run
        result = run(["stack", "output", "--json", "--stack", backend_stack], workspace.work_dir, self._env())
        values = json.loads(result.stdout or "{}")
        def page(number: int, size: int) -> list[dict]:
            history = run(["stack", "history", "--json", "--page-size", str(size), "--page", str(number),
                           "--stack", backend_stack], workspace.work_dir, self._env())
            return json.loads(history.stdout or "[]") or []

        last = (page(1, 1) or [{}])[0]
        if last.get("result") not in (None, "succeeded"):
            values.pop(RECORD_OUTPUT, None)
        elif last.get("kind") == "refresh" and isinstance(values.get(RECORD_OUTPUT), dict) \
                and self._refreshed_away(page):
            # a refresh recorded objects changed or gone on the clusters since the update that applied the record:
            # the stack no longer holds what its fingerprint says, so the next `up` runs it (and puts them back);
            # its placements stay (the real engine showed `refresh` then `up` leaving a deleted Deployment gone)
            values[RECORD_OUTPUT] = {**values[RECORD_OUTPUT], "fingerprint": ""}
        ended = last.get("endTime") if isinstance(last.get("endTime"), str) else None
        return {k: v for k, v in values.items() if v != SECRET}, ended

    @staticmethod
    def _refreshed_away(page) -> bool:
        """Did a refresh since the stack's last update change its state (anything but `same`)? History newest
        first, a page at a time until that update: most stacks' newest entry is their update, read once."""
        number = 1
        while True:
            entries = page(number, HISTORY_PAGE)
            for entry in entries:
                if entry.get("kind") != "refresh":
                    return False  # the update (or destroy, import) the record is of: nothing changed after it
                if entry.get("result") == "succeeded" and any(
                        count for op, count in (entry.get("resourceChanges") or {}).items() if op != "same"):
                    return True
            if len(entries) < HISTORY_PAGE:
                return False
            number += 1

    def read(self) -> Applied:
        if self.backend.startswith("file://"):
            folder = Path(os.path.expanduser(self.backend.removeprefix("file://")))
            if not (folder / ".pulumi").is_dir():  # the CLI makes it with the first stack: nothing is applied there
                return Applied({}, f"the Pulumi backend {self.backend} (empty: nothing applied yet)")
        try:
            store = checkpoint_store(self.backend)
            if store is not None:
                return self._read_indexed(store)
            if self.command is None:
                self.command = started_cli(self.auto.PulumiCommand)
            return self._read_listed()
        except (OSError, AutomationError) as exc:
            why = exc if isinstance(exc, AutomationError) else f"the Pulumi CLI is not installed: {INSTALL_HINT}"
            if self.strict:
                raise AutomationError(str(why)) from None
            return self.cache.applied_from_cache(f"the local cache {self.cache.path} ({why})")

    def _read_indexed(self, store: CheckpointStore) -> Applied:
        """The record from a listing of the checkpoints (no checkpoint read): each stack's outputs from the local
        cache or the fleet's index when either was read at the object version listed now, or this machine's own
        update's (its window holds the object's write); every other stack is read from its checkpoint, and the
        index is written back with it (`automation/record/index.py`)."""
        from concurrent.futures import ThreadPoolExecutor

        cached = self.cache.load()
        index: dict[str, dict] | None = None
        index_read = False
        chosen: dict[str, Listed] = {}
        self.legacy = {}
        for project in (*PROJECTS, LEGACY_PLATFORM_PROJECT):
            try:
                listing = store.list(project)  # before any output is read: an entry's stamp is never newer
            except OSError as exc:  # not "the CLI is not installed", which `read` says of other OSErrors
                raise AutomationError(f"could not list the stacks in the Pulumi backend {self.backend}: "
                                      f"{exc.strerror or exc}") from None
            for listed in listing:
                name = ours(listed.stack, self.fleet_name)
                if name is None:
                    continue
                if project == LEGACY_PLATFORM_PROJECT:
                    self.legacy[name] = "organization"  # a DIY backend's stacks have no organization
                chosen.setdefault(name, listed)  # the new project's stack wins over a legacy one of the name
        fresh: dict[str, dict] = {}
        stale: list[tuple[str, Listed]] = []
        known = 0  # stacks taken from the local cache, needing no request
        for name, listed in chosen.items():
            mine = cached.get(name) or {}
            if mine.get("stamp") == listed.stamp and mine.get("project") == listed.project:
                fresh[name] = mine
                known += 1
                continue
            # this machine's own update, while its cache entry keeps the window (a copied backend folder keeps
            # the objects' times, not their inodes). The object's time is when its last write finished, after the
            # history's whole-second end when the machine is busy: it must lie between the update's start and
            # `seen`, so another update counts as this one only if it ran whole between this one's end and the
            # automation API's reads right after it (as `UpdateWindow.holds` argues for the stamp)
            window = UpdateWindow.from_json(mine.get("window"))
            if window is not None and store.local_clock and listed.project in PROJECTS \
                    and window.start <= listed.written <= window.seen:
                fresh[name] = {**index_entry(listed, mine.get("lastUpdate") or history_time(window.end),
                                             mine.get("outputs") or {}), "window": mine["window"]}
                continue
            if not index_read:
                index, index_read = store.get_index(self.fleet_name), True
            there = (index or {}).get(listed.key)
            if there is not None and there.get("stamp") == listed.stamp and isinstance(there.get("outputs"), dict):
                fresh[name] = index_entry(listed, there.get("lastUpdate"), there["outputs"])
            else:
                stale.append((name, listed))
        try:
            if stale:
                if self.command is None:  # the CLI is started only when some stack must be read from it
                    self.command = started_cli(self.auto.PulumiCommand)
                workspaces = {project: self._workspace(project) for project in {listed.project for _, listed in stale}}
                pool = ThreadPoolExecutor(READERS)
                try:
                    read = pool.map(lambda s: self._outputs(workspaces[s[1].project], s[1].stack), stale)
                    for (name, listed), (values, ended) in zip(stale, read):
                        fresh[name] = index_entry(listed, ended, values)
                finally:  # a failed read is reported at once, not after every queued one has run its process
                    pool.shutdown(wait=True, cancel_futures=True)
        except self.auto.errors.CommandError as exc:
            raise AutomationError(f"could not read the record from the Pulumi backend {self.backend}: "
                                  f"{first_error(exc)}") from None
        self.cache.save(fresh)
        repaired = "index up to date"
        if len(fresh) > known:  # something was not this machine's cache: make the index say what this read saw
            if not index_read:
                index, index_read = store.get_index(self.fleet_name), True
            wanted = {chosen[name].key: {k: e[k] for k in ("stamp", "lastUpdate", "outputs")}
                      for name, e in fresh.items()}
            if index != wanted:
                try:
                    store.put_index(self.fleet_name, wanted)
                    repaired = "index rewritten"
                except OSError as exc:  # a read-only backend (a CI preview's credentials): the next read reads again
                    repaired = f"index not written: {exc.strerror or exc}"
        source = f"the Pulumi backend {self.backend}"
        if stale:
            why = ("no index" if index is None else "not in the index, or updated since it was written")
            source += f" ({len(stale)} of {len(chosen)} stacks read from their checkpoints: {why}; {repaired})"
        stacks = {name: AppliedStack.from_outputs(e["outputs"], e["lastUpdate"]) for name, e in fresh.items()}
        return Applied({name: seeded(name, stack, self.root) for name, stack in stacks.items()}, source)

    def _read_listed(self) -> Applied:
        """Today's read for a backend with no store here: `stack ls` per project (the CLI loads every checkpoint)
        and `stack output` for each stack updated since the cache."""
        from concurrent.futures import ThreadPoolExecutor

        auto = self.auto
        cached = self.cache.load()
        fresh: dict[str, dict] = {}
        stale: list[tuple[str, Any, str, str | None]] = []  # (stack, workspace, backend stack, lastUpdate) to read
        self.legacy = {}
        try:
            for project in (*PROJECTS, LEGACY_PLATFORM_PROJECT):
                workspace = self._workspace(project)
                for summary in workspace.list_stacks():
                    name = ours(summary.name, self.fleet_name)
                    if name is None:
                        continue
                    if project == LEGACY_PLATFORM_PROJECT:
                        self.legacy[name] = organization_of(summary.url)
                    if name in fresh:  # the new project's stack wins over a legacy one of the name
                        continue
                    stamp = summary.last_update.isoformat() if summary.last_update else None
                    entry = cached.get(name)
                    if entry is not None and stamp is not None and entry.get("lastUpdate") is None:
                        window = UpdateWindow.from_json(entry.get("window"))
                        if window is not None and window.holds(summary.last_update):  # this machine's own update
                            entry = {"lastUpdate": stamp, "outputs": entry.get("outputs") or {}}
                    if entry is None or stamp is None or entry.get("lastUpdate") != stamp:
                        stale.append((name, workspace, summary.name, stamp))
                        fresh[name] = {}
                    else:
                        fresh[name] = entry
            # one CLI process per stack whose outputs changed since the cache (every stack on a fresh machine):
            # READERS at once, so a large fleet's first read is not thousands of processes one after another
            pool = ThreadPoolExecutor(READERS)
            try:
                outputs = pool.map(lambda s: self._outputs(s[1], s[2])[0], stale)
                for (name, _, _, stamp), values in zip(stale, outputs):
                    fresh[name] = {"lastUpdate": stamp, "outputs": values}
            finally:  # a failed read is reported at once, not after every queued one has run its process
                pool.shutdown(wait=True, cancel_futures=True)
        except auto.errors.CommandError as exc:
            raise AutomationError(f"could not read the record from the Pulumi backend {self.backend}: "
                                  f"{first_error(exc)}") from None
        self.cache.save(fresh)
        stacks = {name: AppliedStack.from_outputs(e["outputs"], e["lastUpdate"]) for name, e in fresh.items()}
        return Applied({name: seeded(name, stack, self.root) for name, stack in stacks.items()},
                       f"the Pulumi backend {self.backend}")

    def applied(self, stack: str, outputs: Mapping[str, Any], window: UpdateWindow | None = None) -> None:
        self.cache.put(stack, outputs, window)

    def destroyed(self, stack: str) -> None:
        self.cache.put(stack, None)


def seeded(name: str, stack: AppliedStack, root: Path) -> AppliedStack:
    """A stack applied by a release before the record moved into the backend has no record output: its placements
    are taken from that release's `<state>/state.json`, so its replicas stay, and its fingerprint stays "", so the
    next `up` runs it once and its program writes the record (nothing else changes)."""
    if stack.fingerprint:
        return stack
    try:
        old = json.loads((root / "state.json").read_text())["stacks"][name]
        placements = tuple(replica_from_dict(p) for p in old.get("placements") or [])
    except (OSError, ValueError, KeyError, TypeError):
        return stack
    return AppliedStack("", placements, {**(old.get("outputs") or {}), **stack.outputs}, applied_at=stack.applied_at)


def organization_of(url: str | None) -> str:
    """A stack's organization from its console URL (Pulumi Cloud: https://app.pulumi.com/<org>/<project>/<stack>);
    DIY backends have none, and call it `organization`."""
    if url and url.startswith(("https://", "http://")):
        parts = url.split("://", 1)[1].split("/")
        if len(parts) >= 4 and parts[1]:
            return parts[1]
    return "organization"
