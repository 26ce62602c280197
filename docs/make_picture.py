"""Make docs/dashboard.svg, the README's picture: today's dashboard at 120x40, drawn from a recorded run of
the spirals demo (docs/dashboard-run.jsonl.gz, its events.jsonl) as it looked while training, two thirds
of the way, with the clock stopped a second after its last event. Drawn from the same recording, the
picture is the same byte for byte; tests/test_readme_picture.py draws it again and fails when it
differs: the dashboard changed since the picture was made. Run it from the repository's root:

    python docs/make_picture.py             # draw docs/dashboard.svg from the recording
    python docs/make_picture.py --record    # first train the demo again (headless, a few minutes on a
                                            # CPU) and keep its events as the new recording
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "docs" / "dashboard-run.jsonl.gz"
PICTURE = ROOT / "docs" / "dashboard.svg"
SIZE = (120, 40)
#: the picture shows the run at this step (of the demo's 3,000): training, its charts well on
UNTIL_STEP = 2000


class _Keys:
    """The run's keys (p, c, q) in the footer, as a live run shows them; nothing is steered."""

    def request_stop(self, source: str = "api", detail: str = "") -> None: ...
    def toggle_pause(self, source: str = "api") -> None: ...
    def request_checkpoint(self, source: str = "api") -> None: ...


def recorded_events(recording: Path = RECORDING, until_step: int = UNTIL_STEP) -> list:
    """The recording's events up to `until_step` (the run's end left out: it is training)."""
    from tuitrain.core.events import parse_line

    events = []
    for line in gzip.decompress(recording.read_bytes()).splitlines():
        event = parse_line(line)
        if event is None:
            continue
        if getattr(event, "step", 0) > until_step or event.name in ("RunFinished", "RunFailed"):
            break
        events.append(event)
    return events


async def _draw(events: list, size: tuple[int, int]) -> str:
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.dashboard.small_svg import smaller
    from tuitrain.sources.run_files import ReplaySource

    now = max(e.time for e in events) + 1.0
    app = DashboardApp(ReplaySource(events, wait=True), _Keys(), None, clock=lambda: now)
    async with app.run_test(size=size) as pilot:
        last = max(getattr(e, "step", 0) for e in events)
        for _ in range(100):  # until every event is on the screen
            await pilot.pause(0.1)
            if app.state.step >= last:
                break
        # every panel drawn from the whole state now, whatever the redraws' pace (it follows the CPU's load)
        app.feed.replot()
        app.feed.refresh_progress()
        app.dashboard.checkpoints.render_rows()
        await pilot.pause(0.5)
        return smaller(app.export_screenshot(title="tuitrain: the spirals demo"))


def draw(recording: Path = RECORDING, size: tuple[int, int] = SIZE) -> str:
    """The picture's SVG, drawn by today's dashboard from `recording`."""
    return asyncio.run(_draw(recorded_events(recording), size))


def record(recording: Path = RECORDING) -> None:
    """Train the demo (headless, in a temporary folder) and keep its events, its run folder named as the
    user's own would be (`runs/spirals/<started>`, not the temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "tuitrain", "run", str(ROOT / "demo" / "spirals.toml"), "--headless"],
            check=True,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
        )
        [run_dir] = (Path(tmp) / "runs" / "spirals").iterdir()
        where = str(run_dir.relative_to(tmp))
        lines = []
        for line in (run_dir / "events.jsonl").read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "RunStarted":
                event["run_dir"] = where
            lines.append(json.dumps(event, separators=(",", ":")).replace(str(run_dir), where))
    recording.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="train the demo again for a new recording first")
    ap.add_argument("--out", default=str(PICTURE))
    args = ap.parse_args(argv)
    if args.record:
        record()
        print(f"recorded {RECORDING.relative_to(ROOT)}")
    Path(args.out).write_text(draw(), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
