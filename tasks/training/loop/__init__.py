"""The training loop: the steps of a run (`steps`), the prompts it draws, the metrics each step writes and the
sampling seeds (with the chance control that re-seeds them)."""
