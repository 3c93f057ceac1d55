"""A user's own model and data, benchmarked by sweeps without touching its package: a 1-D
convolutional classifier and a synthetic sequence dataset (noisy waves of three shapes)."""
from mynets.model import TinyConv1d
from mynets.waves import Waves, make_waves

__all__ = ["TinyConv1d", "Waves", "make_waves"]
