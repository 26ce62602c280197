"""The chart grid and its charts: what a chart shows (plan.py, pure functions), how it is drawn
(drawing.py, parallel.py), the widget every chart is (chart.py) and the kinds of chart (kinds.py: each
registered by its own module here, as metric_plot.py, histogram_plot.py and band_plot.py do)."""
