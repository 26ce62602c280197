"""Slurm: after a preemption (SIGUSR1/SIGUSR2 from `--signal`), the job goes back into the queue with
`scontrol requeue $SLURM_JOB_ID`, asked once by the process that owns the run directory, after the
final checkpoint. The requeued job runs the same command line; `--resume auto` picks the run up.
Must not import torch or textual.
"""

from __future__ import annotations

import os
import subprocess

from tuitrain.core.events import JobRequeued, RunFinished

REQUEUE_TIMEOUT = 60.0  # seconds scontrol may take (a busy controller) before we give up


def requeue_job(enabled: bool = True) -> JobRequeued | None:
    """Ask Slurm to requeue this job; None outside Slurm (`SLURM_JOB_ID` unset) or when turned off
    (`train.requeue = false`), else what scontrol answered."""
    job = os.environ.get("SLURM_JOB_ID", "").strip()
    if not job or not enabled:
        return None
    try:
        r = subprocess.run(
            ["scontrol", "requeue", job],
            capture_output=True,
            text=True,
            timeout=REQUEUE_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as e:  # no scontrol on PATH, or it hung
        return JobRequeued(job_id=job, requeued=False, detail=f"scontrol requeue {job}: {e}")
    if r.returncode != 0:
        said = (r.stderr or r.stdout).strip()[-500:]
        return JobRequeued(
            job_id=job,
            requeued=False,
            detail=f"scontrol requeue {job}: exit code {r.returncode}" + (f": {said}" if said else ""),
        )
    return JobRequeued(job_id=job, requeued=True)


class RequeueOnPreemption:
    """A callback of the run's bus: at the end of a preempted run (RunFinished, reason "preempted"), the
    requeue, once, and its answer as a JobRequeued event. Subscribed last and batched, it comes after the
    files' writers have the RunFinished (the final checkpoint is on disk), and JobRequeued follows it."""

    batch_events = True
    step_events = False

    def __init__(self, bus, enabled: bool = True) -> None:
        self.bus = bus
        self.enabled = enabled
        self.done = False

    def __call__(self, event, state=None) -> None:
        if isinstance(event, RunFinished) and event.reason == "preempted" and not self.done:
            self.done = True
            answer = requeue_job(self.enabled)
            if answer is not None:
                self.bus.emit(answer)
