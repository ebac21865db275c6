"""Tests of attention_ports.core."""
