"""A throwaway PostgreSQL server for the sweep tests (Optuna's RDB storage against a real server).

`postgres_server()` makes a fresh cluster in a temporary folder (initdb, trust authentication),
starts it listening on 127.0.0.1 only, on a free TCP port, with its unix socket inside that folder,
creates the database `optuna` and yields its SQLAlchemy URL
(`postgresql+psycopg2://postgres@127.0.0.1:PORT/optuna`); afterwards it stops the server
(`pg_ctl stop -m immediate`) and removes the folder, also when the test failed.

The pytest fixture `postgres_url` wraps it (a server per test: about a second to start); a test
module imports it:  `from tests.sweep.postgres import postgres_url  # noqa: F401`.

The server binaries (initdb, pg_ctl, postgres) are looked for on PATH, then under Debian's
/usr/lib/postgresql/*/bin (newest version first). PostgreSQL will not run as root: as root the
cluster belongs to, and the server runs as, the `postgres` system user when there is one, else
`nobody` (through runuser, setpriv or su). The test skips, saying why, without the binaries, without
such a user or a way to become it, or without a Python driver (psycopg2, else psycopg 3).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SUPERUSER = "postgres"
DATABASE = "optuna"
START_TIMEOUT_S = 60

# settings that make a throwaway server start and write quickly (its data is gone afterwards)
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "50",
    "shared_buffers": "16MB",
    "logging_collector": "off",
    "log_min_messages": "warning",
}


class PostgresUnavailable(Exception):
    """Why no PostgreSQL server can be started here (the fixture turns it into a skip)."""


@dataclass(frozen=True)
class Driver:
    module: str  # the importable module: psycopg2 or psycopg
    dialect: str  # SQLAlchemy's name for it

    @property
    def error(self) -> type[Exception]:
        return __import__(self.module).OperationalError  # a refused or failed connection

    def connect(self, port: int, dbname: str):
        mod = __import__(self.module)
        return mod.connect(host="127.0.0.1", port=port, user=SUPERUSER, dbname=dbname, connect_timeout=5)


def find_driver() -> Driver:
    for module, dialect in (("psycopg2", "postgresql+psycopg2"), ("psycopg", "postgresql+psycopg")):
        try:
            __import__(module)
        except ImportError:
            continue
        return Driver(module, dialect)
    raise PostgresUnavailable(
        "no PostgreSQL driver for Python (psycopg2 or psycopg): pip install psycopg2-binary (the test extra has it)"
    )


def _version_key(bindir: str) -> tuple:
    version = Path(bindir).parent.name  # /usr/lib/postgresql/15/bin -> "15"
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", version))


def find_bindir() -> Path:
    """The folder holding initdb, pg_ctl and postgres (one installation: pg_ctl starts the
    postgres beside it)."""
    candidates = []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(os.path.dirname(os.path.realpath(on_path)))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    for bindir in candidates:
        if all(os.access(os.path.join(bindir, tool), os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(bindir)
    raise PostgresUnavailable(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or under "
        "/usr/lib/postgresql/*/bin: install Debian's postgresql package (.ci/run does)"
    )


def _runas_prefix() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that runs a server tool unprivileged, and the user it runs as
    (None: as ourselves, who are not root)."""
    if os.geteuid() != 0:
        return [], None
    user = None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            user = pwd.getpwnam(name)
            break
    if user is None or user.pw_uid == 0:
        raise PostgresUnavailable(
            "running as root, and PostgreSQL will not; no 'postgres' or 'nobody' user to run it as"
        )
    if shutil.which("runuser"):
        return ["runuser", "-u", user.pw_name, "--"], user
    if shutil.which("setpriv"):
        return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"], user
    if shutil.which("su"):
        # su runs a shell command line: "$0" "$@" is the command after it; -s: nobody's shell is
        # nologin; "--" before the user, or su would take the tool's options (-w, -D) as its own
        return ["su", "-s", "/bin/sh", "-c", '"$0" "$@"', "--", user.pw_name], user
    raise PostgresUnavailable(
        f"running as root, and PostgreSQL will not; no runuser, setpriv or su to run it as {user.pw_name}"
    )


def _clean_env() -> dict[str, str]:
    # PG* variables of the caller (PGDATA, PGPORT, PGHOST, ...) would steer the tools elsewhere
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = env["LANG"] = "C"
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"(no log: {e})"


class _Server:
    def __init__(self, bindir: Path, prefix: list[str], user: pwd.struct_passwd | None, root: Path):
        self.bindir, self.prefix, self.user, self.root = bindir, prefix, user, root
        self.data = root / "data"
        self.log = root / "server.log"
        self.env = _clean_env()
        self.port = 0

    def run(self, tool: str, *args: str, timeout: float = 120, stdout_file: Path | None = None) -> None:
        cmd = [*self.prefix, str(self.bindir / tool), *args]
        out = stdout_file.open("ab") if stdout_file else subprocess.PIPE
        try:
            # cwd: the unprivileged user may not be able to enter ours (/root)
            proc = subprocess.run(
                cmd,
                cwd=self.root,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        finally:
            if stdout_file:
                out.close()
        if proc.returncode:
            said = proc.stdout.decode(errors="replace") if proc.stdout else _tail(stdout_file)
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{said[-3000:]}")

    def initdb(self) -> None:
        self.run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            timeout=120,
        )
        settings = dict(_SETTINGS, unix_socket_directories=f"'{self.root}'")
        with (self.data / "postgresql.conf").open("a") as f:  # as root: the file stays the user's
            f.write("\n# tests/sweep/postgres.py\n")
            f.writelines(f"{k} = {v}\n" for k, v in settings.items())

    def start(self) -> None:
        # the free port may be taken between our probe and the server's bind: try another
        for attempt in range(3):
            self.port = free_port()
            with (self.data / "postgresql.conf").open("a") as f:
                f.write(f"port = {self.port}\n")  # the last setting of a name wins
            try:
                # -l: the server's output goes to the log, so it holds none of our pipes
                self.run(
                    "pg_ctl",
                    "start",
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.log),
                    "-w",
                    "-t",
                    str(START_TIMEOUT_S),
                    timeout=START_TIMEOUT_S + 30,
                    stdout_file=self.root / "pg_ctl.out",
                )
                return
            except RuntimeError as e:
                log = _tail(self.log)
                if "could not bind" in log and attempt < 2:
                    self.stop()
                    continue
                raise RuntimeError(f"{e}\nserver log:\n{log}") from None

    def stop(self) -> None:
        if not (self.data / "postmaster.pid").exists():
            return
        with contextlib.suppress(Exception):
            self.run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", timeout=60)
        # pg_ctl could not stop it: end the postmaster ourselves (its children follow it)
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGKILL)
            for _ in range(100):
                os.kill(pid, 0)  # raises once it is gone
                time.sleep(0.05)


@contextlib.contextmanager
def postgres_server(database: str = DATABASE) -> Iterator[str]:
    """Start a throwaway server, yield the SQLAlchemy URL of a fresh database on it; stop and remove it
    afterwards. Raises PostgresUnavailable when this machine cannot run one (no binaries, driver or user)."""
    driver = find_driver()
    bindir = find_bindir()
    prefix, user = _runas_prefix()
    # our own folder in the system's temporary folder, not pytest's tmp_path: that one is under
    # /tmp/pytest-of-root (0700), which the unprivileged user could not enter
    root = Path(tempfile.mkdtemp(prefix="tuitrain-pg-"))
    server = None
    try:
        if user is not None:
            try:
                os.chown(root, user.pw_uid, user.pw_gid)
            except OSError as e:
                raise PostgresUnavailable(f"cannot give {root} to the {user.pw_name} user: {e}") from None
            os.chmod(root, 0o755)
            if subprocess.run(
                [*prefix, "test", "-w", str(root)], stdin=subprocess.DEVNULL, capture_output=True, check=False
            ).returncode:
                raise PostgresUnavailable(
                    f"the {user.pw_name} user cannot write {root} (a folder above it is closed to it?)"
                )
        server = _Server(bindir, prefix, user, root)
        server.initdb()
        server.start()
        deadline = time.monotonic() + 20
        while True:  # pg_ctl -w waited for it already; this is the driver's own say-so
            try:
                conn = driver.connect(server.port, "postgres")
                break
            except driver.error:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the server on port {server.port} accepts no connection:\n{_tail(server.log)}"
                    ) from None
                time.sleep(0.1)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{database}"')
        finally:
            conn.close()
        yield f"{driver.dialect}://{SUPERUSER}@127.0.0.1:{server.port}/{database}"
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The SQLAlchemy URL of a fresh database on a throwaway PostgreSQL server (one per test)."""
    try:
        cm = postgres_server()
        url = cm.__enter__()
    except PostgresUnavailable as e:
        pytest.skip(f"no PostgreSQL server for this test: {e}")
    try:
        yield url
    finally:
        cm.__exit__(None, None, None)
