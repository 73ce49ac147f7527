"""The GPU lab notebook: experiments, probes and developer scripts (not in the wheel).

Nothing shipped imports this package (an import-linter contract in pyproject.toml), and
pyproject's package list leaves it out of the wheel (.ci/run checks the wheel's files).
Each module's docstring says when to run it; the measuring ones go through
compute.gpu.bench, the one harness. The runner for the device machine is gpu_run.sh
(tests, sanitize, bench, compare); ptx_hashes.py proves a kernel refactor changed no
shipped PTX; gen_wgmma_wrappers.py writes kernels/wgmma_wrappers.cuh.
"""
