"""The exit statuses every `tpu-training` command shares, from sysexits.h where one fits. A
command's own statuses (``status``'s 65 and 66, ``preflight``'s 1) are in its module."""

EXIT_OK = 0
EXIT_CONFIG_ERROR = 2
"""The stack's configuration or a project file is invalid."""
EXIT_USAGE = 64
"""The command line is wrong (sysexits.h EX_USAGE): nothing was run."""
EXIT_UNAVAILABLE = 69
"""A tool the command needs cannot be run, or the stack does not exist (EX_UNAVAILABLE)."""
EXIT_CANNOT_WRITE = 73
"""An output file could not be written (sysexits.h EX_CANTCREAT)."""
EXIT_TRY_LATER = 75
"""Live state (or the stack) could not be read: nothing was done; try again later (EX_TEMPFAIL)."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C, SIGINT): 128 + the signal's number, as shells report it."""
