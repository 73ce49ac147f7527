"""Data files the core ships with: the reference example's vectors."""
