"""`tuitrain serve` in a real browser: headless Chromium (Debian's `chromium`) opens the printed URL,
the page's script reaches the dashboard over the websocket, and a screenshot is taken; without the
token the browser gets the refusal. Driven over the DevTools protocol with aiohttp's websocket client.
Skipped where `chromium` is not on PATH."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import subprocess
import time

import pytest

chromium = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(chromium is None, reason="no chromium on PATH (Debian: apt-get install chromium)")
pytest.importorskip("textual_serve", reason="tuitrain serve needs textual-serve (pip install 'tuitrain[serve]')")
aiohttp = pytest.importorskip("aiohttp", reason="tuitrain serve needs aiohttp (textual-serve's web server)")


class Page:
    """One browser tab over the DevTools protocol: evaluate JavaScript, take screenshots."""

    def __init__(self, ws) -> None:
        self.ws, self.n = ws, 0

    async def call(self, method: str, **params) -> dict:
        self.n += 1
        await self.ws.send_json({"id": self.n, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive()).data)
            if msg.get("id") == self.n:
                assert "error" not in msg, msg
                return msg["result"]

    async def js(self, expression: str):
        return (await self.call("Runtime.evaluate", expression=expression, returnByValue=True))["result"].get("value")

    async def wait(self, expression: str, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.js(expression)
            if value:
                return value
            await asyncio.sleep(0.1)
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


async def open_page(session, devtools: int, url: str) -> Page:
    async with session.put(f"http://127.0.0.1:{devtools}/json/new?{url}") as r:
        target = await r.json()
    ws = await session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
    return Page(ws)


def test_chromium_shows_the_dashboard_with_the_token_and_the_refusal_without(finished_run, serve, tmp_path):
    tiny, run = finished_run
    served = serve(tiny.root, run)
    browser = subprocess.Popen(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,860",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        devtools = None
        for line in browser.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
            if m := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
                devtools = int(m.group(1))
                break
        assert devtools, "chromium did not start its DevTools endpoint"

        async def browse() -> bytes:
            async with aiohttp.ClientSession() as session:
                refused = await open_page(session, devtools, f"{served.base}/")
                text = await refused.wait(
                    "location.href.startsWith('http') && document.readyState === 'complete' && document.body.innerText",
                    "the page without the token",
                )
                assert "403" in text and "token" in text
                assert served.viewers() == []

                page = await open_page(session, devtools, served.url)
                # textual.js marks the body once the app's first bytes arrive over the websocket
                await page.wait("document.body.classList.contains('-first-byte')", "the dashboard's first bytes")
                assert len(served.viewers()) == 1
                await asyncio.sleep(1.0)  # the first frames drawn
                assert not await page.js("document.body.classList.contains('-closed')")
                shot = await page.call("Page.captureScreenshot", format="png")
                return base64.b64decode(shot["data"])

        png = asyncio.run(browse())
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        (tmp_path / "dashboard.png").write_bytes(png)  # kept with the test's files, to look at
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait()
