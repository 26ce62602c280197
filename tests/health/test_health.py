"""The run watches itself (SPEC "Health"): trouble injected into real training (a batch scaled x300, a
NaN item, an item that hangs), found, acted on (alert, skip, rollback, stop, abort) and reported (the
console, the events, a webhook on 127.0.0.1 started here). The rules alone: tests/core/test_health_rules.py.
The tests that take `exact_device` run on TUITRAIN_TEST_DEVICE (the CPU by default; tests/conftest.py)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import Receiver, cli_env, python_run, read_events
from tests.health.healthproj import CONFIG
from tuitrain.run.runner import prepare_run

HERE = Path(__file__).parent
SPIKE_BATCH = 100  # the batch of epoch 1 scaled x300: step 101


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's project folder with healthproj.py and health.toml; runs go to runs/."""
    shutil.copy(HERE / "healthproj.py", tmp_path / "healthproj.py")
    config = tmp_path / "health.toml"
    config.write_text(CONFIG.format(runs=tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TUITRAIN_ALERTS_WEBHOOK", raising=False)
    monkeypatch.delenv("TUITRAIN_ALERTS_COMMAND", raising=False)
    yield config
    sys.modules.pop("healthproj", None)


def train(config: Path, *sets: str, resume: str | None = None):
    run = prepare_run(config, list(sets), resume=resume)
    code = run.execute()
    return code, run.run_dir, read_events(run.run_dir)


def of(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["event"] == name]


def device_sets(device: str) -> list[str]:
    """The sets that train on `device`. Off the CPU the rules judge the loss on the steps that log only
    (a CPU loss is on the host every step; elsewhere reading it is a sync): a device run logs every
    step, so that the step a test injects its trouble into is judged there too."""
    return [f"train.device={device}"] + ([] if device == "cpu" else ["log.every_n_steps=1"])


def step_losses(events: list[dict]) -> dict[int, float]:
    """The last logged train loss of each step (a rollback logs some steps again)."""
    return {
        e["step"]: e["metrics"]["loss"]
        for e in events
        if e["event"] == "MetricsLogged" and e["scope"] == "step" and e["split"] == "train"
    }


# --- trouble in real training ------------------------------------------------------------------


def test_the_x300_batch_raises_one_alert_at_its_step_on_the_console_in_the_events_and_at_a_webhook(project):
    receiver = Receiver()
    try:
        env = dict(cli_env(), TUITRAIN_ALERTS_WEBHOOK=receiver.url)
        done = python_run(
            [
                "-m",
                "tuitrain",
                "run",
                str(project),
                "--headless",
                "--set",
                f"data.scale_batch={SPIKE_BATCH}",
                "--set",
                "watch.loss_spike=skip",
                "--set",
                "train.max_steps=110",
            ],
            timeout=120,
            env=env,
            cwd=project.parent,
        )
        assert done.returncode == 0, done.stderr
        alerts = [line for line in done.stderr.splitlines() if line.startswith("ALERT")]
        assert len(alerts) == 1 and "loss_spike" in alerts[0] and f"step {SPIKE_BATCH + 1}" in alerts[0], alerts
        run_dir = next((project.parent / "runs" / "health").iterdir())
        events = read_events(run_dir)
        raised = of(events, "AlertRaised")
        assert [(a["rule"], a["step"], a["action"]) for a in raised] == [("loss_spike", SPIKE_BATCH + 1, "skip")]
        assert raised[0]["value"] > 1000
        assert [(s["step"], s["batch"]) for s in of(events, "StepSkipped")] == [(SPIKE_BATCH + 1, SPIKE_BATCH)]
        deadline = time.monotonic() + 10
        while not receiver.got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(receiver.got) == 1, receiver.got
        body = receiver.got[0]
        assert body["rule"] == "loss_spike" and body["step"] == SPIKE_BATCH + 1 and body["level"] == "warning"
        assert body["experiment"] == "health" and body["run_dir"] == str(run_dir)
        assert "loss spike" in body["text"] and body["title"] in body["text"]
        assert "loss spike" in (run_dir / "experiment.log").read_text()
    finally:
        receiver.close()


def test_skip_trains_as_if_the_batch_had_not_come(project, exact_device):
    """Skipping the x300 batch gives bit for bit the weights of a run whose data never held it."""
    code, run_dir, events = train(
        project,
        f"data.scale_batch={SPIKE_BATCH}",
        "watch.loss_spike=skip",
        "train.max_steps=150",
        *device_sets(exact_device),
    )
    assert code == 0
    assert [(s["step"], s["batch"]) for s in of(events, "StepSkipped")] == [(SPIKE_BATCH + 1, SPIKE_BATCH)]
    code, clean_dir, _ = train(
        project, f"data.drop_batch={SPIKE_BATCH}", "train.max_steps=150", *device_sets(exact_device)
    )
    assert code == 0
    skipped, clean = torch.load(run_dir / "model.pt"), torch.load(clean_dir / "model.pt")
    assert all(torch.equal(skipped[k], clean[k]) for k in clean)


def test_skip_passes_over_a_nan_batch(project, test_device):
    code, run_dir, events = train(project, "data.nan_item=800", "watch.nonfinite=skip", *device_sets(test_device))
    assert code == 0
    skipped = of(events, "StepSkipped")
    assert [(s["step"], s["batch"], s["rule"]) for s in skipped] == [(51, 50, "nonfinite")]
    assert of(events, "AlertRaised")[0]["action"] == "skip"
    weights = torch.load(run_dir / "model.pt")
    assert all(torch.isfinite(v).all() for v in weights.values())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


def test_a_nan_still_fails_the_run_by_default(project):
    code, run_dir, events = train(project, "data.nan_item=800")
    assert code == 1
    assert "loss is nan at step 51" in of(events, "RunFailed")[0]["error"]


def test_rollback_recovers_to_within_a_quarter_of_the_clean_run(project):
    code, clean_dir, clean = train(project, "train.epochs=2")
    assert code == 0
    code, run_dir, events = train(
        project,
        "train.epochs=2",
        f"data.scale_batch={SPIKE_BATCH}",
        "watch.loss_spike=rollback",
        "watch.rollback_lr_factor=0.5",
    )
    assert code == 0
    back = of(events, "RolledBack")
    # the x300 batch comes once an epoch: epoch 1 at step 101, epoch 2 (one step behind) at step 228
    assert [(b["from_step"], b["to_step"]) for b in back] == [(101, 100), (228, 200)]
    assert back[0]["skipped_batches"] == [[1, SPIKE_BATCH]] and back[0]["lr_factor"] == 0.5
    assert back[1]["skipped_batches"] == [[1, SPIKE_BATCH], [2, SPIKE_BATCH]]
    final = of(events, "EpochCompleted")[-1]["metrics"]["train/loss"]
    clean_final = of(clean, "EpochCompleted")[-1]["metrics"]["train/loss"]
    assert final <= 1.25 * clean_final, (final, clean_final)
    # without the rule the same data ruins the run (the control)
    code, _, ruined = train(project, "train.epochs=2", f"data.scale_batch={SPIKE_BATCH}", "watch.loss_spike=alert")
    assert code == 1 and "nan" in of(ruined, "RunFailed")[0]["error"]


def test_a_run_stopped_after_a_rollback_resumes_bitwise(project, exact_device):
    sets = [
        f"data.scale_batch={SPIKE_BATCH}",
        "watch.loss_spike=rollback",
        "log.every_n_steps=1",
        "train.epochs=2",
        f"train.device={exact_device}",
    ]
    code, _, whole = train(project, *sets)
    assert code == 0
    # the same run, stopped at step 150 (after its first rollback), then resumed
    run = prepare_run(project, sets)

    def stop_at_150(event, state):
        if event.name == "MetricsLogged" and event.step == 150 and event.scope == "step":
            run.interrupter.request_stop("test")

    run.subscribe(stop_at_150, steps=False)
    assert run.execute() == 130
    code, _, events = train(project, *sets, resume=str(run.run_dir))
    assert code == 0
    starts = [i for i, e in enumerate(events) if e["event"] == "RunStarted"]
    assert len(starts) == 2 and events[starts[1]]["start_step"] == 150
    resumed = events[starts[1] :]  # the resumed session appends to the same events.jsonl
    after = {s: v for s, v in step_losses(resumed).items() if s > 150}
    assert after and after == {s: v for s, v in step_losses(whole).items() if s > 150}
    assert [b["from_step"] for b in of(resumed, "RolledBack")] == [228]


def test_stop_ends_the_run_gracefully_with_the_weights_from_before_the_spike(project):
    code, run_dir, events = train(project, f"data.scale_batch={SPIKE_BATCH}", "watch.loss_spike=stop")
    assert code == 130
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and info["step"] == SPIKE_BATCH
    # the newest checkpoint holds step 100, before the spike (written as a step checkpoint there already)
    assert of(events, "CheckpointSaved")[-1]["step"] == SPIKE_BATCH


def test_a_data_loader_stuck_for_40s_is_aborted_in_seconds_with_its_stack_in_the_log(project):
    t0 = time.monotonic()
    done = python_run(
        [
            "-m",
            "tuitrain",
            "run",
            str(project),
            "--headless",
            "--set",
            "data.sleep_item=1600",
            "--set",
            "data.sleep=40",
            "--set",
            'watch.stall="2s"',
            "--set",
            "watch.stall_action=abort",
        ],
        timeout=60,
        env=cli_env(),
        cwd=project.parent,
    )
    took = time.monotonic() - t0
    assert done.returncode == 1, done.stderr
    assert took < 25, took  # stall 2 s after step 100; the item would hold the run for 40 s
    run_dir = next((project.parent / "runs" / "health").iterdir())
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and info["reason"] == "stalled" and info["step"] == 100, info
    log = (run_dir / "experiment.log").read_text()
    assert "time.sleep(self.sleep)" in log and "__getitem__" in log  # where it is stuck
    assert "epoch-0001-step-00000100.pt" in done.stderr  # the last sound checkpoint is named
    assert "ALERT error [stall]" in done.stderr


def test_a_stall_alert_names_the_stack_and_training_goes_on(project):
    code, run_dir, events = train(
        project, "data.sleep_item=1600", "data.sleep=3", 'watch.stall="1s"', "train.max_steps=110"
    )
    assert code == 0
    raised = of(events, "AlertRaised")
    assert [(a["rule"], a["step"], a["action"]) for a in raised] == [("stall", 100, "alert")]
    assert "time.sleep(self.sleep)" in (run_dir / "experiment.log").read_text()


def test_starved_data_raises_one_alert(project):
    code, run_dir, events = train(
        project, "data.slow=0.004", 'metrics.train=["loss", "data_wait"]', "train.max_steps=60", "watch.data_wait=0.3"
    )
    assert code == 0
    raised = [a for a in of(events, "AlertRaised") if a["rule"] == "data_wait"]
    assert len(raised) == 1 and raised[0]["value"] > 0.3


def test_no_rule_reads_the_device_on_a_step_that_logs_nothing(project, monkeypatch):
    """As on an accelerator (the loss not read back every step): with every rule on, the calls that
    synchronize a device with the host happen on logged steps only."""
    from tuitrain.core.callbacks import EventBus
    from tuitrain.core.control import Interrupter
    from tuitrain.run.build import build_learner

    run = prepare_run(
        project,
        [
            "watch.loss_spike=skip",
            "watch.grad_spike=skip",
            "watch.nonfinite=skip",
            'metrics.train=["loss"]',
            "train.max_steps=60",
            "checkpoint.every_n_steps=0",
        ],
    )
    learner, train_loader, _ = build_learner(run.cfg, run.run_dir, EventBus(), Interrupter())
    learner.guard.check_every_step = False  # what a CUDA device sets
    calls: list[int] = []
    for name in ("item", "tolist", "cpu", "__float__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *a, _real=real, **k):
            calls.append(learner.state.step)  # steps completed
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    result = learner.fit(train_loader, None)
    assert result.status == "completed", result.error
    every = learner.log_every_n_steps
    assert calls, "the logged steps read the loss"
    # a logged step N reads before its update (the rules, at N - 1 steps done) and after it (its log)
    assert all(s % every in (0, every - 1) for s in calls), sorted(
        set(s for s in calls if s % every not in (0, every - 1))
    )


def test_a_monitor_alerts_on_what_it_is_given_and_a_stop_rule_sets_stop_requested(tmp_path):
    from tuitrain import Monitor

    receiver = Receiver()
    try:
        mon = Monitor(
            "mine",
            run_dir=tmp_path / "run",
            dashboard=False,
            watch={"loss_spike": "stop", "spike_window": 20},
            alerts={"webhook": receiver.url},
        ).start()
        stopped_at = None
        for step in range(1, 60):
            loss = 1.0 + 0.01 * (step % 3) if step != 40 else 50.0
            mon.log(step, loss=torch.tensor(loss))
            if step == 20:
                mon.alert("my own alert", "the validation set looks odd", level="error")
            deadline = time.monotonic() + 5
            while step == 40 and not mon.stop_requested and time.monotonic() < deadline:
                time.sleep(0.02)  # the Monitor judges on its own thread
            if mon.stop_requested:
                stopped_at = step
                break
        mon.finish()
        assert stopped_at == 40
        events = read_events(tmp_path / "run")
        raised = of(events, "AlertRaised")
        assert [(a["rule"], a["step"], a["action"], a["level"]) for a in raised] == [
            ("user", 20, "alert", "error"),
            ("loss_spike", 40, "stop", "warning"),
        ]
        assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"
        deadline = time.monotonic() + 10
        while len(receiver.got) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [b["title"] for b in receiver.got] == ["my own alert", "loss spike at step 40"]
    finally:
        receiver.close()


def test_a_webhook_that_fails_is_said_once_and_never_stops_training(project):
    code, run_dir, events = train(
        project,
        'alerts.webhook="http://127.0.0.1:9/nothing-listens"',
        f"data.scale_batch={SPIKE_BATCH}",
        "train.epochs=2",
        "watch.loss_spike=skip",
    )
    assert code == 0
    assert len(of(events, "AlertRaised")) == 2
    said = [e["text"] for e in of(events, "OutputPrinted") if "alerts: the webhook" in e["text"]]
    assert len(said) == 1 and "said once" in said[0], said


def test_under_ddp_a_rank_stuck_in_a_step_aborts_the_run_within_the_stall_time(project):
    """Two gloo ranks: rank 0 hangs loading an item, rank 1 waits in the all-reduce. The watchdog ends the
    run in seconds (not at the collective's timeout), failed with reason stalled and the stuck stack."""
    t0 = time.monotonic()
    done = python_run(
        [
            "-m",
            "tuitrain",
            "run",
            str(project),
            "--headless",
            "--set",
            "train.strategy=ddp",
            "--set",
            "train.devices=2",
            "--set",
            "data.sleep_item=1600",
            "--set",
            "data.sleep=120",
            "--set",
            'watch.stall="3s"',
            "--set",
            "watch.stall_action=abort",
        ],
        timeout=100,
        env=cli_env(),
        cwd=project.parent,
    )
    took = time.monotonic() - t0
    assert done.returncode == 1, done.stderr
    assert took < 60, took
    run_dir = next((project.parent / "runs" / "health").iterdir())
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and info["reason"] == "stalled", info
    log = (run_dir / "experiment.log").read_text()
    assert "time.sleep(self.sleep)" in log  # the stuck rank's stack
    assert "rank 1: no training step completed" in log and "Thread MainThread" in log.split("rank 1:")[1]


def test_the_dashboard_model_lists_alerts_and_logs_them(project):
    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.core.events import from_dict

    code, run_dir, events = train(
        project, f"data.scale_batch={SPIKE_BATCH}", "watch.loss_spike=rollback", "train.epochs=1"
    )
    assert code == 0
    state = DashboardState()
    changed = set()
    for e in events:
        changed |= state.apply([from_dict(e)])
    from tuitrain.dashboard.state.changes import Alerts

    assert Alerts in changed
    assert [(a.rule, a.step, a.action) for a in state.alerts] == [("loss_spike", SPIKE_BATCH + 1, "rollback")]
    shown = [text for _, text, _ in state.lines]
    assert any(t.startswith(f"[alert] step {SPIKE_BATCH + 1}: loss spike") for t in shown), shown
    assert any("rolled back from step 101 to step 100" in t for t in shown), shown


def test_an_alert_command_gets_the_alert_as_json_on_stdin(project, tmp_path):
    out = tmp_path / "alert.json"
    script = tmp_path / "receive.py"
    script.write_text(f"import sys\nopen({str(out)!r}, 'w').write(sys.stdin.read())\n")
    code, run_dir, events = train(
        project,
        f"data.scale_batch={SPIKE_BATCH}",
        "watch.loss_spike=skip",
        "train.max_steps=120",
        f'alerts.command="{sys.executable} {script}"',
    )
    assert code == 0
    body = json.loads(out.read_text())  # the run's end waits for the alert's delivery
    assert body["rule"] == "loss_spike" and body["step"] == SPIKE_BATCH + 1 and body["action"] == "skip"
    assert body["run_dir"] == str(run_dir)
