"""Tests of attention_ports.conformance."""
