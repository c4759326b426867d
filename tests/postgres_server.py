"""A throwaway PostgreSQL server for tests, from Debian's packages, run as the postgres user."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time

from tests.portal_server import free_port


def binaries() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    assert found, "install Debian's postgresql (make test does, as root)"
    return os.path.dirname(found[-1])


class PostgresServer:
    def __init__(self):
        self.bin = binaries()
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="modelplane-pg-")
        shutil.chown(self.dir, "postgres", "postgres")

    def _as_postgres(self, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True, timeout=120)

    def __enter__(self) -> PostgresServer:
        data = os.path.join(self.dir, "data")
        self._as_postgres(f"{self.bin}/initdb", "-D", data, "-A", "trust", "-U", "postgres")
        self._as_postgres(f"{self.bin}/pg_ctl", "-D", data, "-l", os.path.join(self.dir, "log"), "-w", "-o",
                          f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1", "start")
        for _ in range(50):
            if subprocess.run([f"{self.bin}/pg_isready", "-h", "127.0.0.1", "-p", str(self.port)]).returncode == 0:
                break
            time.sleep(0.1)
        self._as_postgres(f"{self.bin}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "portal")
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", f"{self.bin}/pg_ctl", "-D", os.path.join(self.dir, "data"),
                        "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/portal"
