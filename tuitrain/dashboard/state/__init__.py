"""What the dashboard knows of a run, folded from its events: the state (model.py), its series and media,
the compared runs and a sweep's trials, and how the events reach it (bridge.py, feed.py) and how often
the screen redraws (pacing.py). Must not import textual."""
