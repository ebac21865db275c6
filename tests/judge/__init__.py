"""Tests of attention_ports.judge."""
