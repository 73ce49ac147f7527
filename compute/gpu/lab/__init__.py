"""Developer scripts for the GPU machine: figures, peer comparison, tuning, code generation.

Nobody using the app runs these, so this package is left out of the wheel (pyproject's
package list names compute.gpu but not compute.gpu.lab). Each module's docstring says
when to run it; all measure through compute.gpu.bench, the one harness.
"""
