"""The application: the command line, training runs, comparisons, checkpoints and logs."""
