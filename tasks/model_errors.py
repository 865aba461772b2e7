"""The error of naming a model that cannot be had, in its own module so that resolving names (tasks/models.py) and
fetching real models (tasks/real_model.py) can both raise it without importing each other."""


class ModelNotFound(ValueError):
    """A model path that does not hold an HF-format model, or a named model that cannot be had."""
