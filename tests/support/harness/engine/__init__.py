"""The engine test tier's doubles: plugin executables the real Pulumi CLI starts in place of the
plugins that cannot be had here (docs/engine-tests.md). The CLI and the Python language host are
the real ones, built by .ci/engine.

- ``providers``: the ``gcp`` and ``kubernetes`` resource providers, whose create, read and delete
  go to the loopback fakes the other tests use, and whose replace decisions follow
  ``domain/provider_rules.py``;
- ``program_server``: a fork server that starts the program, the plugin doubles and the language
  host's Python commands from a warm interpreter;
- ``engine``: the harness that writes the plugin executables, logs the CLI in to a file backend
  and runs its commands.

Every decision the engine takes (steps, targets, replacement triggers, aliases, protect, locks,
outputs) is the real engine's, and every call the language host answers is the real host's; the
doubles decide only what a provider would.
"""
