"""Tests of attention_ports.runtimes.r."""
