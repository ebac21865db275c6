"""Tests of attention_ports.tools."""
