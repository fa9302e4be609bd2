"""Pure planning and decisions: no Pulumi, no cloud SDK (an import-linter contract in
pyproject.toml keeps it so)."""
