"""Tests of attention_ports.spec."""
