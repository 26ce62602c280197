"""The side panels and the output log: progress, devices, checkpoints, samples (with pictures.py and
graphics.py for images), the run list and the control bar."""
