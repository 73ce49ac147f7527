"""NumPy compute core of FlashAttention Explorer.

Imports NumPy only: no Qt, no pyqtgraph, no CuPy (the GPU backend in `compute.gpu`
imports CuPy lazily), so it runs on a GPU server with no display.
"""

from .attention import DTYPES, ORDERS, dense_attention, tiled_attention
from .backward import attention_backward
from .backward_ledger import pass_ledger, problem_ledger
from .backward_schedule import PASS_TENSORS, PASSES
from .inputs import InputError, Inputs, load_inputs, random_inputs, seed_example, validate_inputs
from .ledger import (
    Ledger,
    closed_form_ledger,
    element_bytes,
    ledger,
    paper_block_sizes,
    theorem2_bound,
)
from .mask import Mask
from .problem import DType, Problem
from .schedule import DIRECTIONS, TENSORS, Action, Region
from .trace import Step, Trace, build_trace

__all__ = [
    "DIRECTIONS",
    "DTYPES",
    "ORDERS",
    "PASSES",
    "PASS_TENSORS",
    "Problem",
    "TENSORS",
    "Action",
    "DType",
    "InputError",
    "Inputs",
    "Ledger",
    "Mask",
    "Region",
    "Step",
    "Trace",
    "attention_backward",
    "build_trace",
    "closed_form_ledger",
    "dense_attention",
    "element_bytes",
    "ledger",
    "load_inputs",
    "paper_block_sizes",
    "pass_ledger",
    "problem_ledger",
    "random_inputs",
    "seed_example",
    "theorem2_bound",
    "tiled_attention",
    "validate_inputs",
]
