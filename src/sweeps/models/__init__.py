"""Models of the reference studies (cnn10, WideResNet-28-10, MLPs, torchvision's ResNet-50).

Owns: the model classes that ``model._target_`` names. Every constructor takes the dataset's
``in_shape`` and ``num_outputs`` first. Imports: torch, torchvision only.
"""
from sweeps.models.zoo import CNN10, MLP, WideResNet, count_parameters, resnet50

__all__ = ["CNN10", "WideResNet", "MLP", "resnet50", "count_parameters"]
