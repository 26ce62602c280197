"""What the dashboard knows of a run, folded from its events: the state (model.py) and the kinds of change
an event makes (changes.py), its series, media, device history and speed (series.py, media.py,
devices.py, throughput.py), the compared runs and a sweep's trials, and how the events reach it
(bridge.py, feed.py) and how often the screen redraws (pacing.py). Must not import textual."""
