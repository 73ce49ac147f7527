"""The GUI's state without widgets: the configuration, AppState, the trace builder worker and playback."""
