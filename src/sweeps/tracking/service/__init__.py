"""The MLflow store in a process of its own: which commands start one (``registry``), the job's pipe to
it (``connection``), the process (``server``), the client a job holds (``client``).
"""
