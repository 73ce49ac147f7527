"""The decode pass's window view: the KV cache streamed by one block per K/V head or cut
into splits side by side, the combine step, and each split's partial statistics.

- model: DecodeStep, the numbers one view shows (compute.decode on seeded inputs); no Qt.
- canvas: the cache, the splits and the combine drawn for a step of the animation.
- view: DecodeView, the controls, the canvas, the statistics table and the ledger text.
"""
