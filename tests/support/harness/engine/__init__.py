"""The engine test tier's doubles: plugin executables the real Pulumi CLI starts in place of the
plugins that cannot be had here (docs/engine-tests.md).

- ``language_host``: the Python language host's gRPC service, running the real
  ``pulumi-language-python-exec`` of the pinned SDK as the real host does;
- ``providers``: the ``gcp`` and ``kubernetes`` resource providers, whose create, read and delete
  go to the loopback fakes the other tests use, and whose replace decisions follow
  ``domain/provider_rules.py``;
- ``engine``: the harness that writes the plugin executables, logs the CLI in to a file backend
  and runs its commands.

Every decision the engine takes (steps, targets, replacement triggers, aliases, protect, locks,
outputs) is the real engine's; the doubles decide only what a provider or the language host
would.
"""
