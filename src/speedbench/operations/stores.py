"""A team's shared stores on one machine: PostgreSQL, an MLflow server on it, a Prefect server.

The embedded default tracks into a SQLite file. A team whose sweeps run on many engine hosts
needs one tracking server that every worker reaches: MLflow's server with a PostgreSQL backend
and served artifacts (workers upload records and plots through it, so no result is a path on
one machine), and Prefect's server on the same PostgreSQL. ``speedbench stores start`` brings
all three up from Debian's PostgreSQL packages and this environment's ``mlflow`` and
``prefect``; ``speedbench stores stop`` takes them down. Data and logs live under one folder.

The database password is generated once into ``<root>/password`` (mode 0600), or taken from
``SPEEDBENCH_DB_PASSWORD``. It reaches the servers through libpq's ``PGPASSWORD`` in their
environment, never on a command line (where ``ps`` shows it), in a URI that gets logged, or in
MLflow or Prefect.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

PASSWORD_ENV = "SPEEDBENCH_DB_PASSWORD"
DB_USER = "speedbench"
DATABASES = ("mlflow", "prefect")
STATE_FILE = "stores.json"


class StoreError(RuntimeError):
    """A store that cannot be set up or started (what is wrong, in one line)."""


@dataclass(frozen=True)
class StorePorts:
    """Loopback ports of the three servers."""

    postgres: int = 5433
    mlflow: int = 5000
    prefect: int = 4200


def postgres_bin(name: str) -> str:
    """A PostgreSQL server program (initdb, pg_ctl, ...) from PATH or Debian's folders."""
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    raise StoreError(
        f"PostgreSQL's {name} is not installed; install Debian's server package "
        "(apt-get install postgresql) and run again"
    )


class TeamStores:
    """PostgreSQL, MLflow and Prefect servers under ``root``, on loopback ports."""

    def __init__(self, root: str | Path, ports: StorePorts = StorePorts()):
        self.root = Path(root).resolve()
        self.ports = ports
        self.data = self.root / "postgres"
        self.artifacts = self.root / "artifacts"

    @property
    def mlflow_uri(self) -> str:
        """What workers and flows set as their MLflow tracking URI."""
        return f"http://127.0.0.1:{self.ports.mlflow}"

    @property
    def prefect_api_url(self) -> str:
        """What workers and flows set as ``PREFECT_API_URL``."""
        return f"http://127.0.0.1:{self.ports.prefect}/api"

    def database_url(self, database: str, driver: str) -> str:
        """A SQLAlchemy URL without the password (libpq reads it from ``PGPASSWORD``)."""
        return f"postgresql+{driver}://{DB_USER}@127.0.0.1:{self.ports.postgres}/{database}"

    def password(self) -> str:
        """The database password: the environment's, else the one generated on first start."""
        if os.environ.get(PASSWORD_ENV):
            return os.environ[PASSWORD_ENV]
        path = self.root / "password"
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(24))
        return path.read_text().strip()

    def start(self, prefect: bool = True) -> dict[str, str]:
        """Start whatever is not running yet; return the URIs to give workers."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._start_postgres()
        env = {**os.environ, "PGPASSWORD": self.password()}
        state = self._state()
        if not _alive(state.get("mlflow_pid")):
            state["mlflow_pid"] = self._spawn(
                "mlflow",
                [
                    "server",
                    "--backend-store-uri", self.database_url("mlflow", "psycopg2"),
                    "--artifacts-destination", self.artifacts.as_uri(),
                    "--serve-artifacts",
                    "--host", "127.0.0.1",
                    "--port", str(self.ports.mlflow),
                    "--workers", "1",
                ],
                env,
            )  # fmt: skip
        if prefect and not _alive(state.get("prefect_pid")):
            prefect_env = {
                **env,
                "PREFECT_API_DATABASE_CONNECTION_URL": self.database_url("prefect", "asyncpg"),
                # The UI it serves calls this API (else the default port, 4200).
                "PREFECT_UI_API_URL": self.prefect_api_url,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            }
            state["prefect_pid"] = self._spawn(
                "prefect",
                ["server", "start", "--host", "127.0.0.1", "--port", str(self.ports.prefect)],
                prefect_env,
            )
        (self.root / STATE_FILE).write_text(json.dumps(state))
        _wait_healthy(f"{self.mlflow_uri}/health", "MLflow", self.root / "mlflow.log")
        uris = {"MLFLOW_TRACKING_URI": self.mlflow_uri}
        if prefect:
            _wait_healthy(f"{self.prefect_api_url}/health", "Prefect", self.root / "prefect.log")
            uris["PREFECT_API_URL"] = self.prefect_api_url
        return uris

    def stop(self) -> None:
        """Stop the servers this folder started (a no-op for those already gone)."""
        state = self._state()
        for key in ("prefect_pid", "mlflow_pid"):
            pid = state.get(key)
            if pid is not None and _alive(pid):
                os.killpg(pid, signal.SIGTERM)
                _wait_gone(pid)
        (self.root / STATE_FILE).unlink(missing_ok=True)
        if (self.data / "postmaster.pid").exists():
            self._as_postgres([postgres_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "stop"])

    def _state(self) -> dict[str, int]:
        path = self.root / STATE_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def _start_postgres(self) -> None:
        if not (self.data / "PG_VERSION").exists():
            self.data.mkdir(parents=True, exist_ok=True)
            pwfile = self.root / "initdb.pw"
            pwfile.write_text(self.password())
            try:
                self._own([self.data, pwfile])
                self._as_postgres(
                    [
                        postgres_bin("initdb"), "-D", str(self.data), "-U", DB_USER,
                        f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8",
                    ]
                )  # fmt: skip
            finally:
                pwfile.unlink(missing_ok=True)
        if not (self.data / "postmaster.pid").exists():
            options = f"-p {self.ports.postgres} -k {self.data} -c listen_addresses=127.0.0.1"
            self._as_postgres(
                [
                    postgres_bin("pg_ctl"), "-D", str(self.data), "-o", options,
                    "-l", str(self.data / "server.log"), "-w", "start",
                ]
            )  # fmt: skip
        env = {**os.environ, "PGPASSWORD": self.password()}
        where = ["-h", "127.0.0.1", "-p", str(self.ports.postgres), "-U", DB_USER]
        query = "SELECT datname FROM pg_database"
        listed = subprocess.run(
            [postgres_bin("psql"), *where, "-d", "postgres", "-Atc", query],
            env=env, capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        for database in DATABASES:
            if database not in listed:
                subprocess.run([postgres_bin("createdb"), *where, database], env=env, check=True)

    def _own(self, paths: list[Path]) -> None:
        """PostgreSQL refuses to run as root: as root, its files belong to ``postgres``."""
        if os.geteuid() != 0:
            return
        self.root.chmod(0o755)
        for folder in self.root.parents:
            if not folder.stat().st_mode & 0o001:
                raise StoreError(
                    f"PostgreSQL runs as the user postgres, which cannot enter {folder}: "
                    "choose a root it can reach (e.g. under /srv or /var/tmp)"
                )
        for path in paths:
            shutil.chown(path, "postgres", "postgres")

    def _as_postgres(self, argv: list[str]) -> None:
        program = Path(argv[0]).name
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise StoreError(f"{program} failed: {' '.join(tail)}")

    def _spawn(self, program: str, args: list[str], env: dict[str, str]) -> int:
        """A server in its own process group, logging to ``<root>/<program>.log``."""
        executable = Path(sys.executable).parent / program
        log = (self.root / f"{program}.log").open("ab")
        proc = subprocess.Popen(
            [str(executable), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.root,
        )
        return proc.pid


def _alive(pid: int | None) -> bool:
    """Whether the process runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text() if pid else ""
    except OSError:
        return False
    return bool(stat) and stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _wait_gone(pid: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)


def _wait_healthy(url: str, what: str, log: Path, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
    raise StoreError(f"the {what} server did not answer {url} in {timeout_s:.0f} s: {tail}")
