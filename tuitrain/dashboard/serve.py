"""`tuitrain serve`: the dashboard of `tuitrain watch` in a web browser, through textual-serve.

textual-serve runs one command per browser connection (each tab its own viewer process, with its own
keys) and relays that process's screen over a websocket. This module adds two things:

- a random token as the first part of every path (`/<token>/`, `/<token>/ws`, `/<token>/static/...`):
  a request whose path does not start with it, whatever it asks for, gets 403. In the path rather than
  in a query or a cookie, because the page's own links (the websocket, the scripts) then carry it with
  no help from the browser, and no other page on the same host can borrow it;
- the viewer each connection runs (`python -m tuitrain.dashboard.serve PATH...`, or one SWEEP_DIR): `watch` without
  its terminal check, as textual-serve's driver talks to the app over pipes; it ends with its tab, with
  the server's end (Ctrl+C ends the open tabs first), or on its own when the server is gone.

textual-serve and aiohttp are imported only when serving. Like the rest of the dashboard, this module
must not import the run layer (`tuitrain.config`, `tuitrain.run`, `tuitrain.cli`).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TextIO


class ServeError(Exception):
    """Why the server cannot start (the address is taken, the host unknown), in one line."""


def viewer_command(runs: list[Path], theme: Path | None) -> str:
    """The shell command textual-serve runs for each browser connection."""
    parts = [sys.executable, "-m", "tuitrain.dashboard.serve", "--server-pid", str(os.getpid())]
    if theme is not None:
        parts += ["--theme", str(Path(theme).resolve())]
    parts += ["--", *(str(Path(r).resolve()) for r in runs)]
    return " ".join(shlex.quote(p) for p in parts)


def url_host(host: str) -> str:
    """The host as a browser should write it: this machine's name when listening on every address."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"[{host}]" if ":" in host else host


def check_address(host: str, port: int) -> None:
    """ServeError unless (host, port) can be listened on now, checked the way aiohttp binds (reusing
    an address in TIME_WAIT), so that a taken port is one line rather than a printed URL and a traceback."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ServeError(f"--host {host}: not an address of this machine ({e.strerror})") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(address)
            except OSError as e:
                raise ServeError(f"{host}:{port}: cannot listen there ({e.strerror}); choose another --port") from None


def serve(
    runs: list[Path],
    theme: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Serve the dashboard of `runs` until Ctrl+C (or SIGTERM); prints the one URL that opens it."""
    out = out or sys.stdout
    check_address(host, port)
    token = token or secrets.token_urlsafe(24)
    url = f"http://{url_host(host)}:{port}/{token}/"
    names = ", ".join(str(r) for r in runs[:3]) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")
    server = _server_class()(
        viewer_command(runs, theme),
        host=host,
        port=port,
        title=f"tuitrain: {names}",
        public_url=f"http://{url_host(host)}:{port}",
        token=token,
        greeting=(
            f"tuitrain serve: the dashboard of {names}; each browser tab is a "
            f"viewer of its own; Ctrl+C ends the server\n{url}"
        ),
        out=out,
    )
    try:
        server.serve()
    except OSError as e:  # taken between the check and the bind
        raise ServeError(f"{host}:{port}: cannot listen there ({e.strerror or e})") from None
    return 0


def _server_class():
    """textual-serve's Server with the token guard. Reaches inside: `_make_app` (private) is wrapped
    to mount its app under the token; pyproject pins textual-serve to the 1.1 series it was read from."""
    import asyncio

    from aiohttp import web
    from textual_serve.server import Server

    class TokenServer(Server):
        def __init__(self, command: str, *, token: str, greeting: str, out: TextIO, **kwargs) -> None:
            super().__init__(command, **kwargs)
            self.token, self.greeting, self.out = token, greeting, out
            self.sessions: set[asyncio.Task] = set()  # the open websockets' handlers

        def initialize_logging(self) -> None:
            """textual-serve's own logging prints every request (the token with it) and a logo; left
            unset, Python prints only warnings and errors, to stderr."""

        async def on_startup(self, app: web.Application) -> None:
            # aiohttp calls this before its site listens: the one URL is printed once a connection to the
            # port is accepted, so that a browser (or a script) that opens it at once is not refused
            self.greeter = asyncio.get_running_loop().create_task(self.greet_when_listening())

        async def greet_when_listening(self) -> None:
            host = "127.0.0.1" if self.host in ("", "0.0.0.0") else "::1" if self.host == "::" else self.host
            for _ in range(500):  # 5 s at most: then the URL is printed all the same
                try:
                    _, writer = await asyncio.open_connection(host, self.port)
                except OSError:
                    await asyncio.sleep(0.01)
                    continue
                writer.close()
                break
            print(self.greeting, file=self.out, flush=True)  # the one URL

        async def _make_app(self) -> web.Application:
            inner = await super()._make_app()
            outer = web.Application(middlewares=[self.guard])
            outer.add_subapp(f"/{self.token}", inner)
            return outer

        @web.middleware
        async def guard(self, request: web.Request, handler):
            first = request.path.split("/", 2)[1]
            if not secrets.compare_digest(first.encode(), self.token.encode()):
                return web.Response(
                    status=403, text="403: this address needs the token that `tuitrain serve` printed\n"
                )
            if request.path == f"/{self.token}":
                raise web.HTTPFound(f"/{self.token}/")
            response = await handler(request)
            if not response.prepared:  # the page loads a font from elsewhere: the token is not to go with it
                response.headers["Referrer-Policy"] = "no-referrer"
            return response

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            task = asyncio.current_task()
            self.sessions.add(task)  # type: ignore[arg-type]  # a handler runs in a task: never None
            try:
                return await super().handle_websocket(request)
            finally:
                self.sessions.discard(task)

        async def on_shutdown(self, app: web.Application) -> None:
            # aiohttp would wait up to a minute for the open tabs' websockets; cancelled, each one tells
            # its viewer to quit (textual-serve's handler does so on its way out) and closes
            for task in list(self.sessions):
                task.cancel()
            if self.sessions:
                await asyncio.wait(list(self.sessions), timeout=10)

        async def handle_index(self, request: web.Request):
            # the page's links name the address the browser used (an ssh tunnel's own local port)
            self.public_url = f"{request.scheme}://{request.host}"
            return await super().handle_index(request)

    return TokenServer


def view(argv: list[str] | None = None) -> int:
    """The viewer one browser connection runs: the dashboard `tuitrain watch` shows for these runs."""
    p = argparse.ArgumentParser(prog="python -m tuitrain.dashboard.serve")
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--theme", type=Path)
    p.add_argument("--server-pid", type=int)
    args = p.parse_args(argv)
    # the server ends this viewer (its tab closed, the server stopping): a Ctrl+C meant for the server
    # is not this process's to act on, and a server killed outright must not leave it running
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.server_pid:
        threading.Thread(target=_end_without, args=(args.server_pid,), daemon=True).start()
    return open_viewer(args.runs, args.theme)


def open_viewer(runs: list[Path], theme: Path | None) -> int:
    """The dashboard `tuitrain watch` shows for `runs` (paths): a sweep's folder (its trials, live, with the
    parameters view), several runs of any tools compared, or one run (another tool's: read only)."""
    from tuitrain.dashboard import entry
    from tuitrain.sources import registry
    from tuitrain.sources.sweep_files import is_sweep_dir

    if len(runs) == 1 and is_sweep_dir(runs[0]):
        return entry.run_sweep_watch(runs[0], theme)
    found = registry.find(list(runs))
    note = " · ".join(found.missing)
    if not found.runs:  # (the server checked the paths: they were emptied since)
        print(f"tuitrain: no runs under {', '.join(map(str, runs))}", file=sys.stderr)
        return 2
    if len(found.runs) > 1:
        return entry.run_compare(found.runs, theme, note) if note else entry.run_compare(found.runs, theme)
    ref = found.runs[0]
    if registry.is_own(ref):
        return entry.run_watch(ref.path, theme)
    return entry.run_watch(ref, theme, note=note)


def _end_without(server_pid: int) -> None:
    """Leave once the server is gone: textual's web driver runs on when its input ends."""
    while True:
        time.sleep(1.0)
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass  # a process of another user took the number: not ours to judge


if __name__ == "__main__":
    sys.exit(view())
