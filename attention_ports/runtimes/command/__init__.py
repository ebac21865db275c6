"""Ports run as commands: any program speaking the public protocol (docs/protocol.md)."""
