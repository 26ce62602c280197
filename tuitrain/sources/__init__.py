"""A run's files read back: the layer below the dashboard that `tuitrain watch`, `ls`, `serve`, sweeps and
the notebook read runs through. A source turns what a folder holds into tuitrain's events. Never imports
textual."""
