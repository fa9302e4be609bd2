"""Pure planning and decisions: no Pulumi, no cloud SDK (tests/test_layout.py keeps it so)."""
