"""Decoding: N_q new queries against a KV cache, grouped-query heads and split-KV.

- problem: DecodeProblem (sizes, heads, tile width, splits, dtype) and seeded inputs.
- attention: the dense, one-pass and split-KV schedules' numbers, the splits' partials
  and their combine (the forward's α-rescale across splits).
- walk: each schedule as declared HBM actions.
- ledger: bytes per generated token, counted from the walk and in closed form.
- roofline: bound time and which bound applies on the H200; the summary of a step.
- statistics: one query row's split statistics and their merge, for a panel.
"""

from .attention import (
    Merge,
    SplitPartials,
    combine,
    decode_attention,
    dense_decode,
    merge_states,
    one_pass_decode,
    split_kv_decode,
    split_partials,
)
from .ledger import (
    DecodeLedger,
    closed_form_decode_ledger,
    decode_element_bytes,
    decode_ledger,
    decode_ledgers,
)
from .problem import MAX_NEW_QUERIES, SCHEDULES, DecodeProblem, decode_inputs
from .roofline import (
    H200_COPY_BANDWIDTH,
    H200_MATMUL_PEAK,
    H200_NOMINAL_BANDWIDTH,
    H200_SMS,
    RooflinePoint,
    bandwidth_fraction,
    decode_roofline,
    decode_summary,
    filling_splits,
    roofline_point,
)
from .statistics import SplitRow, SplitTable, split_table
from .walk import TENSORS, DecodeAction, decode_walk

__all__ = [
    "H200_COPY_BANDWIDTH",
    "H200_MATMUL_PEAK",
    "H200_NOMINAL_BANDWIDTH",
    "H200_SMS",
    "MAX_NEW_QUERIES",
    "SCHEDULES",
    "TENSORS",
    "DecodeAction",
    "DecodeLedger",
    "DecodeProblem",
    "Merge",
    "RooflinePoint",
    "SplitPartials",
    "SplitRow",
    "SplitTable",
    "bandwidth_fraction",
    "closed_form_decode_ledger",
    "combine",
    "decode_attention",
    "decode_element_bytes",
    "decode_inputs",
    "decode_ledger",
    "decode_ledgers",
    "decode_roofline",
    "decode_summary",
    "decode_walk",
    "dense_decode",
    "filling_splits",
    "merge_states",
    "one_pass_decode",
    "roofline_point",
    "split_kv_decode",
    "split_partials",
    "split_table",
]
