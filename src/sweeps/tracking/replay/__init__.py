"""A later start: a job's config hash and what an earlier run of it left (``resume``), and the runs
nobody closed, closed with what their jobs left (``replay``).
"""
