"""Problem sources, the trajectory schema, the Parquet experience store and the tiny model builder.

Nothing here needs Prefect or vLLM.
"""
