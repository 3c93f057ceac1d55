"""A run's journal: each epoch one JSON line of ``epochs.jsonl`` (``journal``), and how far it has
reached MLflow (``cursor``).
"""
