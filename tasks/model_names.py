"""The names of the real pretrained models, in their own module so that resolving names (tasks/models.py) and
fetching the models (tasks/real_model.py, whose settings offer them as choices) need not import each other."""

# Real pretrained models fetched from a registry package and converted once (tasks/real_model.py).
REAL_MODEL_NAMES = ("smollm2",)
