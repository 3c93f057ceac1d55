"""The MLflow store: where it is and opening it safely (``store``), creating a missing sqlite store
(``create``), how long a call to a silent server waits (``http_policy``), MLflow's entities without
importing mlflow (``entities``).
"""
