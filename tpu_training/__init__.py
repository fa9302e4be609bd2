"""The `tpu-training` tool: what stands on the component library to run a stack.

- ``stack_config``: the stack's configuration (``tpu-training:*`` keys), read and validated as the
  program reads it;
- ``offline``, ``project_files``: the project's files, and the program run under the Pulumi SDK's
  mocks (the offline plan);
- ``recovery``: the recovery round (live state, decisions, a targeted `pulumi up`) and its watch;
- ``commands``: one module per subcommand of ``tpu-training`` (``cli``), each standing on the
  shared modules here, never on another command.

The Pulumi program itself is ``infra/__main__.py``, which imports ``stack_config`` from here.
"""
