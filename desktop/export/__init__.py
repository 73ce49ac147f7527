"""Exports: frames from the window's own views, animation and ledger writers, atomic files."""
