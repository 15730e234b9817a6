"""Applies protocol events to the model and turns results into protocol output (sync)."""
