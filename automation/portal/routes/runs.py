"""The fleet's plan and the runs that apply it, each shown only as far as the caller may see."""

from __future__ import annotations

import json

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from automation.portal.deps import Objects, Who
from automation.portal.overlay import overlaid
from automation.portal.service import ApiError
from automation.portal.state import PLAN

MAX_RUN_ID = 2 ** 63 - 1
router = APIRouter()


@router.get("/plan")
def get_plan(who: Who, portal: Objects) -> JSONResponse:
    store = portal.store
    with store.read() as conn:
        plan = overlaid(PLAN.get(conn),
                        {deployment: json.loads(part) for (deployment, _), part in store.pending_parts(conn, None).items()})
        problems = portal.reads.held_back(conn)
    if who.admin:
        plan["problems"] = problems  # why no stack is applied, when the background replan found objects to reject
    else:
        for key in ("replicas", "unscheduled", "dropped"):
            plan[key] = [r for r in plan.get(key, []) if who.can_see(r["deployment"].split("/", 1)[0])]
    return JSONResponse(plan)


@router.get("/runs")
def list_runs(who: Who, portal: Objects) -> JSONResponse:
    with portal.store.read() as conn:
        return JSONResponse({"items": [r for r in portal.store.list_runs(conn) if portal.sessions.visible_stack(who, r["stack"])]})


@router.get("/runs/{run_id}")
def get_run(run_id: str, who: Who, portal: Objects) -> JSONResponse:
    number = int(run_id) if run_id.isdigit() and len(run_id) < 20 else 0
    if not 0 < number <= MAX_RUN_ID:  # not a run id at all: as unknown as one that was never issued
        raise ApiError(404, "NotFound", f"run {run_id[:40]} not found")
    with portal.store.read() as conn:
        run = portal.store.get_run(conn, number)
    if run is None or not portal.sessions.visible_stack(who, run["stack"]):
        raise ApiError(404, "NotFound", f"run {number} not found")
    return JSONResponse(run)
