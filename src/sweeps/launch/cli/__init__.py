"""The command line: Hydra entry point, the sweep callback (parent run, summary), the sweep check."""
