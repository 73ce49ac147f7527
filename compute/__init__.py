"""NumPy compute core of FlashAttention Explorer.

Imports NumPy only: no Qt, no pyqtgraph, no CuPy (the GPU backend in `compute.gpu`
imports CuPy lazily), so it runs on a GPU server with no display.
"""

from .attention import DTYPES, ORDERS, dense_attention, tiled_attention, tiled_attention_history
from .backward import METHODS, attention_backward
from .backward_ledger import PassLedger, pass_ledger
from .backward_schedule import BACKWARD_TENSORS, PASS_TENSORS, PASSES
from .inputs import InputError, Inputs, load_inputs, random_inputs, seed_example, validate_inputs
from .ledger import (
    LaneLedger,
    Ledger,
    closed_form_ledger,
    ledger,
    paper_block_sizes,
    standard_attention_accesses,
    theorem2_bound,
)
from .schedule import TENSORS, Action, Region, Schedule, Transfer
from .trace import RowState, Step, Trace, build_trace

__all__ = [
    "BACKWARD_TENSORS",
    "DTYPES",
    "METHODS",
    "ORDERS",
    "PASSES",
    "PASS_TENSORS",
    "TENSORS",
    "Action",
    "InputError",
    "Inputs",
    "LaneLedger",
    "Ledger",
    "PassLedger",
    "Region",
    "RowState",
    "Schedule",
    "Step",
    "Trace",
    "Transfer",
    "attention_backward",
    "build_trace",
    "closed_form_ledger",
    "dense_attention",
    "ledger",
    "load_inputs",
    "paper_block_sizes",
    "pass_ledger",
    "random_inputs",
    "seed_example",
    "standard_attention_accesses",
    "theorem2_bound",
    "tiled_attention",
    "tiled_attention_history",
    "validate_inputs",
]
