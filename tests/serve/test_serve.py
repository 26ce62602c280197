"""`tuitrain serve` over HTTP and its websocket, as a browser reaches it: only the printed URL's token
opens anything; with it, a websocket gets the dashboard's screen from a viewer of its own, and the
dashboard's keys steer a live run."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest

from tests.conftest import cli_env
from tests.serve.conftest import screen_text

pytest.importorskip("textual_serve", reason="tuitrain serve needs textual-serve (pip install 'tuitrain[serve]')")
aiohttp = pytest.importorskip("aiohttp", reason="tuitrain serve needs aiohttp (textual-serve's web server)")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def get(url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, data=data, timeout=10) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


async def read_until(ws, seen: list[bytes], want, what: str, timeout: float = 60) -> str:
    """Read the screen a websocket sends until `want(text)`; `seen` keeps every byte read so far."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        text = screen_text(b"".join(seen))
        if want(text):
            return text
        left = deadline - loop.time()
        if left <= 0:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; the screen so far:\n{text[-3000:]}")
        try:
            msg = await asyncio.wait_for(ws.receive(), left)
        except asyncio.TimeoutError:
            continue
        if msg.type == aiohttp.WSMsgType.BINARY:
            seen.append(msg.data)
        elif msg.type != aiohttp.WSMsgType.TEXT:
            pytest.fail(f"the websocket ended ({msg.type.name}) while waiting for {what}:\n{text[-3000:]}")


def test_only_the_printed_token_opens_the_page_its_files_and_its_websocket(finished_run, serve):
    tiny, run = finished_run
    served = serve(tiny.root, run)
    tok, base = served.token, served.base
    assert served.url == f"{base}/{tok}/"
    assert len(tok) >= 32 and served.out.read_text().count("http") == 1  # one URL, and that one

    wrong = "x" * len(tok)
    refused = [
        "/",
        "/ws",
        "/static/js/textual.js",
        "/static/css/xterm.css",
        "/static/",
        "/download/x",
        "/favicon.ico",
        f"/?token={tok}",
        f"/static/{tok}/js/textual.js",
        f"/{wrong}/",
        f"/{wrong}/ws",
        f"/{wrong}/static/js/textual.js",
        f"/{tok[:-1]}/",
        f"/{tok}x/",
        f"/x{tok}/",
        f"/{tok.upper()}/static/js/textual.js",
    ]
    for path in refused:
        code, _ = get(base + path)
        assert code in (401, 403), f"{path}: {code}"
    assert get(base + "/", data=b"x")[0] in (401, 403)

    code, page = get(served.url)
    assert code == 200
    assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/{tok}/ws"' in page
    links = re.findall(r'(?:src|href|url)=?\(?"(http://127\.0\.0\.1[^"]*)"', page)
    assert links and all(link.startswith(f"{base}/{tok}/static/") for link in links), links
    for path in ("static/js/textual.js", "static/css/xterm.css"):
        code, body = get(f"{base}/{tok}/{path}")
        assert code == 200 and body
    assert get(f"{base}/{tok}")[0] == 200  # redirected to the page

    async def websockets() -> None:
        async with aiohttp.ClientSession() as session:
            for url in (
                f"ws://127.0.0.1:{served.port}/ws?width=80&height=24",
                served.ws_url(token=wrong),
                served.ws_url(token=tok[:-1]),
            ):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused_ws:
                    await session.ws_connect(url)
                assert refused_ws.value.status in (401, 403), url

    asyncio.run(websockets())
    assert served.viewers() == []  # nothing was started for them


def test_each_connection_reads_the_dashboard_from_a_viewer_of_its_own(finished_run, serve):
    tiny, run = finished_run
    served = serve(tiny.root, run)

    def dashboard(text: str) -> bool:
        return "served-run" in text and "loss" in text and "accuracy" in text and "completed" in text

    async def tabs() -> tuple[list[int], list[int], int]:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(served.ws_url()) as one, session.ws_connect(served.ws_url()) as two:
                for ws in (one, two):
                    await read_until(ws, [], dashboard, "the finished run's dashboard")
                viewers = served.viewers()
            # a third tab is open while the server is stopped (SIGTERM): the server ends it, and its viewer
            async with session.ws_connect(served.ws_url()) as last:
                await read_until(last, [], dashboard, "the dashboard in a third tab")
                open_then = served.viewers()
                stopped = asyncio.get_running_loop().run_in_executor(None, served.stop)
                while (msg := await asyncio.wait_for(last.receive(), 10)).type == aiohttp.WSMsgType.BINARY:
                    pass  # the screen's last frames, then the close (answered, as a browser does)
                assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), msg
                code = await stopped
            return viewers, open_then, code

    started = time.monotonic()
    viewers, open_then, code = asyncio.run(tabs())
    assert len(viewers) == 2, "each connection runs its own viewer process"
    assert len(open_then) == 1 and open_then[0] not in viewers  # the two closed tabs' viewers ended
    assert code == 0
    assert time.monotonic() - started < 15  # not aiohttp's minute of waiting for open websockets
    tiny.wait_for(lambda: gone(open_then[0]), timeout=15, what="the open tab's viewer to end with the server")


def test_a_viewer_outlives_no_server_killed_outright(finished_run, serve):
    tiny, run = finished_run
    served = serve(tiny.root, run)

    async def tab() -> list[int]:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(served.ws_url()) as ws:
                await read_until(ws, [], lambda t: "served-run" in t, "the dashboard")
                viewers = served.viewers()
                served.proc.kill()  # SIGKILL: no shutdown, no quit sent to the viewers
                served.proc.wait()
                return viewers

    viewers = asyncio.run(tab())
    assert len(viewers) == 1
    tiny.wait_for(lambda: gone(viewers[0]), timeout=15, what="the viewer to end once its server is gone")


def index(run) -> list[dict]:
    try:
        return json.loads((run / "checkpoint" / "index.json").read_text())
    except (OSError, ValueError):
        return []


def test_keys_in_the_browser_steer_a_live_run(tiny, serve):
    run = tiny.root / "live-run"
    # the run trains all through the test (the server and its viewers start meanwhile): a step each 0.1 s, not each
    # 0.02 s, is a fifth of the steps for the same checks (~1.5 CPU-s less)
    proc = tiny.cli_bg(
        "run",
        tiny.config,
        "--headless",
        "--run-dir",
        run,
        "--set",
        "model.sleep=0.1",
        "--set",
        "train.epochs=2000",
        "--set",
        "checkpoint.every_n_epochs=1000",
    )
    try:
        tiny.wait_for(lambda: tiny.last_train_step(run) >= 2, timeout=120, what="the run to train")
        served = serve(tiny.root, run)
        live = "[watching · live]"

        async def steer() -> None:
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(served.ws_url()) as ws:
                    await read_until(ws, [], lambda t: live in t, "the live run's dashboard")
                    await ws.send_json(["stdin", "c"])
                    for _ in range(600):
                        if [e for e in index(run) if e["reason"] == "request"]:
                            break
                        await asyncio.sleep(0.05)
                # the tab is closed: watching never stopped the run
                at = tiny.last_train_step(run)
                for _ in range(600):
                    if tiny.last_train_step(run) > at + 2:
                        break
                    await asyncio.sleep(0.05)
                assert proc.poll() is None and tiny.last_train_step(run) > at + 2
                async with session.ws_connect(served.ws_url()) as ws:
                    seen: list[bytes] = []
                    await read_until(ws, seen, lambda t: live in t, "the dashboard in a new tab")
                    await ws.send_json(["stdin", "q"])
                    await read_until(ws, seen, lambda t: "Stop training and leave?" in t, "the question q asks")
                    await ws.send_json(["stdin", "y"])
                    await asyncio.get_running_loop().run_in_executor(None, proc.wait, 120)

        asyncio.run(steer())
        requested = [e for e in index(run) if e["reason"] == "request"]
        assert requested and (run / "checkpoint" / requested[0]["file"]).is_file()
        assert proc.returncode == 130
        assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
        sources = [(e["command"], e["source"]) for e in tiny.read_events(run) if e["event"] == "ControlReceived"]
        assert ("checkpoint", "dashboard") in sources and ("stop", "dashboard") in sources
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_input_is_one_line_and_exit_2(finished_run, tmp_path):
    tiny, run = finished_run

    def serve_cli(*args) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tuitrain", "serve", *map(str, args)],
            cwd=tmp_path,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = {
            "no run": serve_cli(tmp_path / "nothing-here"),
            "port in use": serve_cli(run, "--port", port),
            "not a port": serve_cli(run, "--port", "99999"),
            "unknown host": serve_cli(run, "--host", "no-such-host.invalid"),
        }
    for what, r in cases.items():
        assert r.returncode == 2, (what, r.stderr)
        assert "Traceback" not in r.stderr and "http" not in r.stdout, (what, r.stdout, r.stderr)
        lines = [line for line in r.stderr.splitlines() if line.startswith("tuitrain")]
        assert len(lines) == 1, (what, r.stderr)
    assert "nothing-here" in cases["no run"].stderr
    assert str(port) in cases["port in use"].stderr


def test_help_does_not_load_the_web_server():
    code = "import sys, tuitrain.cli; print(sorted(m for m in ('aiohttp', 'textual_serve', 'textual') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=cli_env())
    assert out.stdout.strip() == "[]"
    r = subprocess.run(
        [sys.executable, "-m", "tuitrain", "serve", "--help"], capture_output=True, text=True, env=cli_env(), check=True
    )
    assert "--port" in r.stdout and "--host" in r.stdout
