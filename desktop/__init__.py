"""FlashAttention Explorer's desktop side: the Qt app, exports and the command line.

This package's __init__ and `cli` import no Qt, so `flash-explorer ledger` and
`flash-explorer bench` run on a GPU server with no display and no PySide6.
"""


def version() -> str:
    """The installed package's version (what a bug report should quote)."""
    from importlib import metadata

    try:
        return metadata.version("flash-attention-explorer")
    except metadata.PackageNotFoundError:
        return "(not installed)"
