"""Dashboard widgets, one per file; imported by tuitrain.dashboard.app only."""
