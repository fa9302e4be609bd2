"""One module per `tpu-training` subcommand (``tpu_training.cli`` lists them): each builds its own
argparse parser (``parser()``) and runs with ``main(argv)``. A command never imports another
command: what two share lives in a module of ``tpu_training`` (``command_line``, ``exit_codes``,
``plan_output``, ``recovery``)."""
