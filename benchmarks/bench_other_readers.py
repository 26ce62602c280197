"""Lightning CSVLogger, MLflow (file store and SQLite store) and trackio runs of many points read by
tuitrain's readers (tuitrain/sources/lightning_csv.py, mlflow.py, trackio.py) and folded into the
dashboard's state, as `tuitrain watch` does before the first frame (docs/formats/others.md).

    python benchmarks/bench_other_readers.py [--rows 1000000] [--rounds 3] [--dir /tmp/bench-others]

The files are written once into --dir in each tool's format (the layout the tools write: see the tests
in tests/sources/, which write them with the tools themselves) and reused. Prints, per tool, the values
read and the median wall and CPU time (user+sys of this process: the steadier figure on a shared
machine) of find_runs + the source's first read + DashboardState.apply.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import time
from pathlib import Path


def write(root: Path, n: int) -> None:
    csv_path = root / "lightning_logs" / "version_0" / "metrics.csv"
    if not csv_path.exists():
        csv_path.parent.mkdir(parents=True)
        with open(csv_path, "w") as f:
            f.write("epoch,lr,step,train_loss_step,val_loss\n")
            for i in range(n):
                f.write(f"{i // 10000},0.001,{i},{1.0 / (i + 1)!r},\n")
                if i % 10000 == 9999:
                    f.write(f"{i // 10000},,{i},,{0.5 / (i + 1)!r}\n")
    run = root / "mlruns" / "1" / "abc123"
    if not run.exists():
        (run / "metrics" / "train").mkdir(parents=True)
        (root / "mlruns" / "1" / "meta.yaml").write_text("name: bench\nexperiment_id: '1'\nlifecycle_stage: active\n")
        (run / "meta.yaml").write_text(
            "run_id: abc123\nrun_name: big\nstatus: 3\nlifecycle_stage: active\nstart_time: 1\nend_time: 2\n"
        )
        with open(run / "metrics" / "train" / "loss", "w") as f:
            for i in range(n):
                f.write(f"{1795868054652 + i} {1.0 / (i + 1)!r} {i}\n")
    sql = root / "sql" / "mlflow.db"
    if not sql.exists():
        sql.parent.mkdir()
        c = sqlite3.connect(sql)
        c.executescript(
            "CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT, lifecycle_stage TEXT);"
            "CREATE TABLE runs (run_uuid TEXT PRIMARY KEY, name TEXT, status TEXT, start_time INT, end_time INT,"
            " lifecycle_stage TEXT, experiment_id INT);"
            "CREATE TABLE params (key TEXT, value TEXT, run_uuid TEXT);"
            "CREATE TABLE latest_metrics (key TEXT, value FLOAT, timestamp INT, step INT, is_nan INT, run_uuid TEXT);"
            "CREATE TABLE metrics (key TEXT, value FLOAT, timestamp INT, run_uuid TEXT, step INT, is_nan INT,"
            " PRIMARY KEY (key, timestamp, step, run_uuid, value, is_nan));"
            "INSERT INTO experiments VALUES (1, 'bench', 'active');"
            "INSERT INTO runs VALUES ('r1', 'big', 'FINISHED', 1, 2, 'active', 1);"
        )
        c.executemany(
            "INSERT INTO metrics VALUES ('train/loss', ?, ?, 'r1', ?, 0)",
            ((1.0 / (i + 1), 1795868054652 + i, i) for i in range(n)),
        )
        c.commit()
        c.close()
    db = root / "trackio" / "bench.db"
    if not db.exists():
        db.parent.mkdir()
        c = sqlite3.connect(db)
        c.executescript(
            "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, timestamp TEXT NOT "
            "NULL, run_name TEXT NOT NULL, step INTEGER NOT NULL, metrics TEXT NOT NULL);"
            "CREATE TABLE configs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, run_name TEXT NOT "
            "NULL, config TEXT NOT NULL, created_at TEXT NOT NULL);"
        )
        stamp = "2026-11-28T12:28:06.711581+00:00"
        c.executemany(
            "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) VALUES ('r', ?, 'big', ?, ?)",
            ((stamp, i, json.dumps({"train/loss": 1.0 / (i + 1)})) for i in range(n)),
        )
        c.commit()
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/bench-others")
    args = parser.parse_args()
    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.sources import lightning_csv, mlflow, trackio
    from tuitrain.sources.polled import drain

    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    write(root, args.rows)
    cases = [
        ("lightning", lightning_csv, root / "lightning_logs"),
        ("mlflow file store", mlflow, root / "mlruns"),
        ("mlflow sqlite", mlflow, root / "sql" / "mlflow.db"),
        ("trackio", trackio, root / "trackio" / "bench.db"),
    ]
    for label, module, path in cases:
        walls, cpus, values = [], [], 0
        for _ in range(args.rounds):
            t0, c0 = time.perf_counter(), os.times()
            (ref,) = module.find_runs(path)
            events = drain(module.open_source(ref, live=False), timeout=600)
            DashboardState().apply(events)
            c1 = os.times()
            walls.append(time.perf_counter() - t0)
            cpus.append(c1.user + c1.system - c0.user - c0.system)
            values = sum(len(e) for e in events if hasattr(e, "series"))
        print(
            f"{label:18} {values:>10,} values  wall {statistics.median(walls):6.2f} s  "
            f"cpu {statistics.median(cpus):6.2f} s  (median of {args.rounds})",
            flush=True,
        )


if __name__ == "__main__":
    main()
