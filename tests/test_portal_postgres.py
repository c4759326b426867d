"""Several portal processes on one PostgreSQL database: one capacity ledger, no lost write."""

import concurrent.futures

import httpx

from tests.manifests import cluster, deployment, gpu_class
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, free_port, put_retrying, start_process
from tests.postgres_server import PostgresServer


def test_two_portal_processes_share_one_ledger(tmp_path):
    with PostgresServer() as pg:
        ports = [free_port(), free_port()]
        processes = [start_process(tmp_path / f"p{i}", port, ["--database", pg.url, "--no-apply"])
                     for i, port in enumerate(ports)]
        try:
            admin = httpx.Client(base_url=f"http://127.0.0.1:{ports[0]}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
            assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
            assert admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", 10),))).status_code == 201

            def submit(i):
                ns, token = ("team-a", TEAM_A) if i % 2 == 0 else ("team-b", TEAM_B)
                with httpx.Client(base_url=f"http://127.0.0.1:{ports[i % 2]}", timeout=60,
                                  headers={"Authorization": f"Bearer {token}"}) as client:
                    url = f"{API}/namespaces/{ns}/modeldeployments/m{i}"
                    return put_retrying(client, url, deployment(f"m{i}", namespace=ns)).status_code

            with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
                codes = list(pool.map(submit, range(40)))
            assert codes == [201] * 40
            other = httpx.Client(base_url=f"http://127.0.0.1:{ports[1]}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
            plan = other.get("/plan").json()
            stored = sum(len(other.get(f"{API}/namespaces/{ns}/modeldeployments").json()["items"]) for ns in ("team-a", "team-b"))
            assert stored == 40 and len(plan["replicas"]) == 10
            assert sum(u["missing"] for u in plan["unscheduled"]) == 30
        finally:
            for process in processes:
                process.terminate()
                process.wait(10)
