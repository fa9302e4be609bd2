"""The stack program's shared parts: ``infra/__main__.py`` (what `pulumi up` runs) declares the
resources and wires the components; what it reads before that (``last_update``), what its parts
hand on (``parts``) and what it exports (``outputs``) are here, importable by a program of your
own that declares the same stack."""
