"""One job's lifecycle: its MLflow run opened and closed (JobRun), its finish and summary row."""
