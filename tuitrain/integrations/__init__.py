"""Adapters that give other training loops tuitrain's run directory, dashboard and controls.

One file per framework (`lightning`, `transformers`), each a thin layer over `tuitrain.Monitor`.
Only the user imports them: `import tuitrain` and the rest of the package never import a framework.
"""
