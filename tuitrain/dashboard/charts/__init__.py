"""The chart grid and its charts: what a chart shows (plan.py, pure functions), how it is drawn
(drawing.py, parallel.py), and the chart widgets."""
