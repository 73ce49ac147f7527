"""The side panels: configuration controls, row statistics, the HBM ledger and the GPU panel."""
