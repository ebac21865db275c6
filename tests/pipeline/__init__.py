"""Tests of attention_ports.pipeline."""
