"""A write to one ModelDeployment, placed inside its request against the fleet's capacity ledger.

The portal process keeps the stored fleet validated and its reservations charged (`fleet.incremental.FleetLedger`),
in step with the database by two counters (the objects' resourceVersion and the ledger's version): another process
that wrote, or a replan that changed reservations, makes the next write load them again. Inside the serialized
write transaction, the written deployment is placed alone, its stacks composed and checked, and its row of
reservations written (`pending` until the background replan has planned the whole fleet after it). A request that
fails after placing takes the placement back (`undo`), as its transaction is rolled back.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from sqlalchemy.engine import Connection

from automation.portal.auth import Quota
from automation.portal.service import migrated_policies
from automation.portal.state import CAPACITY, RESOURCE_VERSION
from automation.portal.store import Store
from automation.record.applied import replica_from_dict
from automation.planning.stacks import rendered_problems
from fleet.api import KINDS, ModelDeployment, Resource
from fleet.capacity import LiveCapacity
from fleet.incremental import FleetLedger
from fleet.plan import Plan
from fleet.plan_output import plan_to_dict
from fleet.scheduler import PLATFORM_KINDS, PlanMemo
from fleet.stack_id import StackId
from fleet.validate import Fleet, cross_object_problems
from workloads.render import model_stack, render


CHECKED_WITH = (*PLATFORM_KINDS, "InferenceGateway")  # a deployment's model stack and warnings read these


@dataclass
class Placed:
    plan: Plan  # the deployment's replicas, shortfall and dropped replicas
    problems: list[str] = field(default_factory=list)  # objects of its stacks a cluster would reject
    warnings: list[str] = field(default_factory=list)  # validation warnings about it, seen with the fleet


# what a deployment's placement reads besides deployments: a change of one loads the ledger again
REPLACING_KINDS = (*PLATFORM_KINDS, "TeamPolicy")


class Placing:
    def __init__(self, quotas: Callable[[], Mapping[str, Quota]] = dict) -> None:
        """`quotas`: the tokens file's (deprecated), placed with as the TeamPolicies they are read as."""
        self.quotas = quotas
        self._quotas_seen = ""  # the quotas the ledger was loaded with (a reloaded tokens file loads it again)
        self._version: tuple[int, int] | None = None  # (resourceVersion, ledger version) of what is held
        self._objects: dict[tuple[str, str, str], Resource] = {}
        self._stored: dict[tuple[str, str, str], str] = {}  # the resourceVersion each object was validated at
        self._ledger: FleetLedger | None = None
        self._memo = PlanMemo()
        self._undo: tuple | None = None
        self._platform_objects: list[Resource] | None = None

    @contextmanager
    def write(self, store: Store) -> Iterator[Connection]:
        """`store.write()`, taking back in memory whatever the transaction placed if it does not commit."""
        with store.write(on_rollback=self.undo) as conn:
            self._undo = None  # under the write lock: nothing of an earlier transaction is taken back
            yield conn

    # ---- in step with the database -------------------------------------------------------------------

    def sync(self, store: Store, conn: Connection) -> None:
        """Load the stored fleet and its reservations unless this process already holds them as stored."""
        version = (RESOURCE_VERSION.get(conn), store.ledger_version(conn))
        quotas = self.quotas()
        seen = json.dumps({ns: q.model_dump() for ns, q in sorted(quotas.items())})
        if version == self._version and self._ledger is not None and seen == self._quotas_seen:
            return
        objects: dict[tuple[str, str, str], Resource] = {}
        stored: dict[tuple[str, str, str], str] = {}
        policies = []
        for body in store.list(conn):
            if body["kind"] == "TeamPolicy":
                policies.append(body)
            meta = body["metadata"]
            key = (body["kind"], meta.get("namespace") or "", meta["name"])
            stored[key] = meta.get("resourceVersion")
            kept = self._objects.get(key) if self._stored.get(key) == stored[key] else None
            objects[key] = kept or _validated(body)
        reserved = [replica_from_dict(r) for r in json.loads(store.reservations_text(conn))]
        capacity = CAPACITY.text(conn)  # a change of it moves the ledger's version (Writes.capacity)
        live = LiveCapacity.from_json(capacity) if capacity else None
        migrated = [_validated(b) for b in migrated_policies(quotas, policies)]
        self._ledger = FleetLedger(Fleet(objects=list(objects.values()) + migrated, live=live), reserved, self._memo)
        self._objects, self._stored, self._version, self._quotas_seen = objects, stored, version, seen
        self._platform_objects = None

    def forget(self) -> None:
        """The next write loads everything again (a change this process does not place: clusters, classes, caches)."""
        self._version, self._ledger, self._undo = None, None, None

    def track(self, store: Store, conn: Connection, kind: str, namespace: str, name: str, body: dict | None) -> None:
        """A stored change that does not move capacity (a ModelService, a ModelEndpoint): kept in step."""
        if kind in REPLACING_KINDS or kind == "ModelDeployment" or self._version is None:
            self.forget()
            return
        self._hold((kind, namespace, name), body)
        self._version = (RESOURCE_VERSION.get(conn), self._version[1])

    def reconciled(self, store: Store, conn: Connection, before: int, changed: dict[str, list[dict]]) -> None:
        """A full replan stored other reservations for `changed` deployments (ledger version `before` until then)."""
        if self._ledger is None or self._version is None or self._version[1] != before:
            self.forget()
            return
        for key, replicas in changed.items():
            self._ledger.reserve(key, [replica_from_dict(r) for r in replicas])
        self._version = (self._version[0], store.ledger_version(conn))

    # ---- a write ------------------------------------------------------------------------------------

    def place(self, store: Store, conn: Connection, namespace: str, name: str, body: dict | None) -> Placed:
        """Place the stored (or, `body` None, deleted) deployment and write its row; call after `sync` and the
        object's own write, inside a transaction of `write` (which takes it back if the transaction fails)."""
        assert self._ledger is not None
        key, object_key = f"{namespace}/{name}", ("ModelDeployment", namespace, name)
        self._undo = (key, object_key, self._objects.get(object_key), self._stored.get(object_key),
                      self._ledger.saved(key), self._version)
        md = self._hold(object_key, body)
        if md is None:
            self._ledger.remove(key)
            placed = Placed(Plan())
        else:
            assert isinstance(md, ModelDeployment)
            placed = self._checked(md, self._ledger.place(md))
        reservations = [r.recorded().to_dict() for r in placed.plan.replicas]
        version = RESOURCE_VERSION.get(conn)
        store.set_reservation(conn, key, json.dumps(reservations), json.dumps(plan_to_dict(placed.plan)), pending=True,
                              version=version)
        self._version = (version, store.bump_ledger(conn))
        return placed

    def undo(self) -> None:
        """The write's transaction was rolled back: hold what is stored again."""
        if self._undo is None:
            return
        key, object_key, obj, stored, saved, version = self._undo
        self._undo = None
        try:
            self._hold(object_key, None)
            if obj is not None:
                self._objects[object_key], self._stored[object_key] = obj, stored
            assert self._ledger is not None
            self._ledger.restore(key, saved)
            self._version = version
        except Exception:  # never hold a ledger that is not the stored one
            self.forget()
            raise

    def _hold(self, key: tuple[str, str, str], body: dict | None) -> Resource | None:
        if key[0] in CHECKED_WITH:
            self._platform_objects = None
        if body is None:
            self._objects.pop(key, None)
            self._stored.pop(key, None)
            return None
        self._objects[key], self._stored[key] = _validated(body), body["metadata"].get("resourceVersion")
        return self._objects[key]

    # ---- checks of the placed deployment ---------------------------------------------------------------

    def _platform(self) -> list[Resource]:
        """What a deployment's checks read besides itself (built once per change of it, not once per write)."""
        if self._platform_objects is None:
            self._platform_objects = [o for (kind, _, _), o in self._objects.items() if kind in CHECKED_WITH]
        return self._platform_objects

    def _checked(self, md: ModelDeployment, plan: Plan) -> Placed:
        """The stacks a deployment write changes, composed and schema-checked as the full replan checks a changed
        stack: its model stack and its team's stack on each of its clusters (the team's namespace, policy and
        quota there, composed with this deployment alone: the same objects, which the schema checks by shape).
        And its warnings."""
        platform = self._platform()
        on = {r.cluster for r in plan.replicas}
        fleet = Fleet(objects=[o for o in platform if o.kind != "InferenceCluster" or o.name in on] + [md])
        rendered = render(fleet, plan)
        changed = {model_stack(md.namespace, md.name)} | {str(StackId.team(md.namespace, cluster)) for cluster in on}
        problems = rendered_problems(rendered, changed)
        everything = Fleet(objects=platform + [md])
        warnings = [f"{p.path}: {p.message}" for p in cross_object_problems(everything, about=md) if p.warning]
        return Placed(plan, problems, warnings)


def _validated(body: dict) -> Resource:
    return KINDS[body["kind"]][0].model_validate({k: v for k, v in body.items() if k != "status"})
