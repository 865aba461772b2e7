"""`rlep bench`: generation, training, async and policy-update benchmarks, and the result file they write
(report.py). `update` runs without vLLM or Prefect; this package imports nothing, so it stays that way."""
