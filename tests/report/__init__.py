"""Tests of attention_ports.report."""
