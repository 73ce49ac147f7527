"""The two lanes' widgets: HBM tensors above, SRAM tiles below, the transfers' arrows, the colour legend."""
