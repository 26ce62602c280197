"""The Learner's media for one fit: where `log_image`, `log_text` and `log_histogram` write (a `MediaLog` on
rank 0, a `QuietMedia` elsewhere) and what `[log] samples` and `histograms` ask of the loop (`LearnerMedia`,
media.py), opened as a fit starts and closed, everything logged written and said, as it ends. Out of
learner.py. Must not import textual.
"""

from __future__ import annotations

from typing import Any

from .events import OutputPrinted
from .media import LearnerMedia, MediaLog, QuietMedia


def open_media(learner: Any) -> tuple[MediaLog | QuietMedia, LearnerMedia | None]:
    """(the fit's media log, the loop's media chores or None) of a `CoreLearner`."""
    lg, strategy = learner.log_settings, learner.strategy
    if strategy.rank != 0:
        return QuietMedia(), None
    media = MediaLog(learner.run_dir, learner.bus.emit, keep=lg.media_keep, epoch=lambda: learner.state.epoch)
    if not (lg.samples_every or (lg.histograms and lg.histograms_every_n_steps)):
        return media, None
    if strategy.name == "fsdp":  # rank 0 alone holds a shard: no whole model to sample
        learner.bus.emit(OutputPrinted(text="[log] samples and histograms are not taken under FSDP", stream="tuitrain"))
        return media, None
    return media, LearnerMedia(media, learner.raw_model, learner.optimizers, lg, learner.state, learner.ema)


def close_media(media: MediaLog | QuietMedia | None, chores: LearnerMedia | None) -> None:
    """Everything logged is written and said before the run ends."""
    if chores is not None:
        chores.close()
    if media is not None:
        media.close()
