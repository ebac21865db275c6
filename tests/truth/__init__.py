"""Tests of attention_ports.truth."""
