"""sweeps: Hydra-configured sweeps that time deep-learning training correctly and log it to MLflow."""

__version__ = "0.1.0"
