"""Tests of attention_ports.runtimes.julia."""
