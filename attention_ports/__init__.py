"""attention-ports: the harness (catalogue, fixtures, comparison, report, CLI)."""
