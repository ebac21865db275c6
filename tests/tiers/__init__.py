"""Tests of attention_ports.tiers."""
