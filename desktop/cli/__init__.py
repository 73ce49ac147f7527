"""The flash-explorer command line: the GUI entry, headless exports, ledger and benchmarks (no Qt at import)."""
