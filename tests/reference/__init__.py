"""Tests of the NumPy reference (attention_ports.reference, the top-level reference/ folder)."""
