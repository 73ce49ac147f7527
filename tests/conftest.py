"""Test-wide setup. Imports no Qt: the GPU machine runs tests/ without PySide6.

Qt tests (tests/desktop) need a platform plugin even with no display, so the
offscreen platform is the default before anything can import Qt.

Where pytest-xdist is installed (the test extra) and no -n was given, the run is spread
over two worker processes: the development machine has two cores. The GPU machine has no
xdist, so an `-n` in addopts would be an unknown option there; this hook is why it is not.
Pass `-n 0` (or `-p no:xdist`) for one process.

Hypothesis draws its examples from a fixed seed (the "seeded" profile), so every run,
CI's included, tries the same examples and a failure repeats; HYPOTHESIS_PROFILE=explore
draws fresh ones to search further.
"""

import os

import pytest
from hypothesis import settings

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

settings.register_profile("seeded", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "seeded"))

WORKERS = 2


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Runs before xdist's own hook (both tryfirst; a conftest registers later, so it is
    # called first), which turns numprocesses into worker processes.
    option = config.option
    if hasattr(config, "workerinput"):  # a worker: xdist calls this hook there too
        return
    if getattr(option, "numprocesses", 0) is None and getattr(option, "dist", "no") == "no":
        if not (config.getoption("usepdb", False) or option.collectonly):
            option.numprocesses = WORKERS
