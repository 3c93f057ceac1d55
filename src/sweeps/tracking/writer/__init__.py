"""The job's side of tracking: its MLflow run as a writer (``run_writer``), the params, tags and texts
it journals (``records``), and how a run reads in the MLflow UI (``naming``, ``inputs``).
"""
