"""Recovery by itself, what `tpu-training recover` runs: the stack probe (``stack_probe``: config
and live state, decisions), one round (``recovery_round``: settle what an interrupted update left,
then a `pulumi up` targeted at what must be re-created, ``recovery_targets``, through the Pulumi
CLI, ``automation``), what it did (``round_report``) and the watch that runs rounds
(``watch_loop``, woken by the cluster's events, ``recover_events``)."""
