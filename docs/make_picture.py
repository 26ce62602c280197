"""Make docs/dashboard.svg, the README's picture: the spirals demo trained for real (headless, into a
temporary folder), then its dashboard drawn at 120x40 from the run's files, as `tuitrain watch` shows
it once the summary is put away. Run it from the repository's root:

    python docs/make_picture.py [--out docs/dashboard.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


async def draw(run_dir: Path, out: Path) -> None:
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.dashboard.sources import FileSource

    app = DashboardApp(FileSource(run_dir), None, None, watch=True, notice="")
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):  # until the whole run is read
            await pilot.pause(0.05)
            if app.state.final:
                break
        await pilot.pause(0.5)
        await pilot.press("escape")  # the summary: put away, the charts show
        await pilot.pause(0.5)
        out.write_text(app.export_screenshot(title="tuitrain: the spirals demo"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "dashboard.svg"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "spirals"
        subprocess.run([sys.executable, "-m", "tuitrain", "run", str(ROOT / "demo" / "spirals.toml"), "--headless",
                        "--run-dir", str(run_dir), "--set", "metrics.train=[\"loss\", \"accuracy\", \"lr\", "
                        "\"throughput\", \"grad_norm\", \"data_wait\"]"], check=True, cwd=tmp,
                       stdout=subprocess.DEVNULL)
        asyncio.run(draw(run_dir, Path(args.out)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
