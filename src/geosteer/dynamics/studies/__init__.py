"""Options shared by the dynamics commands (``common``); the studies themselves are in the paper package."""
