"""Several portal processes on one PostgreSQL database: one capacity ledger, no lost write."""

import concurrent.futures

from tests.manifests import deployment
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, postgres_portals, put_retrying


def test_two_portal_processes_share_one_ledger(tmp_path):
    with postgres_portals(tmp_path, pool_gpus=10) as client:
        def submit(i):
            ns, token = ("team-a", TEAM_A) if i % 2 == 0 else ("team-b", TEAM_B)
            with client(i % 2, token) as team:
                url = f"{API}/namespaces/{ns}/modeldeployments/m{i}"
                return put_retrying(team, url, deployment(f"m{i}", namespace=ns)).status_code

        with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
            codes = list(pool.map(submit, range(40)))
        assert codes == [201] * 40
        with client(1, ADMIN) as other:
            plan = other.get("/plan").json()
            stored = sum(len(other.get(f"{API}/namespaces/{ns}/modeldeployments").json()["items"])
                         for ns in ("team-a", "team-b"))
    assert stored == 40 and len(plan["replicas"]) == 10
    assert sum(u["missing"] for u in plan["unscheduled"]) == 30
