"""Runs logged before the machine's figures moved under MLflow's ``system/`` prefix
(``host/other_cpu_mean_pct``, ``gpu/energy_j``) still read in the report, on a real sqlite store."""
from __future__ import annotations

from conftest import seed_store, store
from sweeps import names
from sweeps.report.runs import history, job_from_run


def test_the_report_reads_a_run_logged_under_the_former_names(tmp_path):
    seed_store(tmp_path)
    client = store(tmp_path)
    exp = client.create_experiment("old")
    old, new = client.create_run(exp).info.run_id, client.create_run(exp).info.run_id
    client.log_metric(old, "host/other_cpu_mean_pct", 42.0, step=0)
    for step, joules in ((1, 10.0), (2, 12.0)):
        client.log_metric(old, "gpu/energy_j", joules, step=step)
    client.log_metric(new, names.OTHER_CPU_MEAN_PCT, 7.0, step=0)
    client.log_metric(new, "host/other_cpu_mean_pct", 99.0, step=0)  # the current name wins

    job = job_from_run(client.get_run(old))
    assert job.metrics[names.OTHER_CPU_MEAN_PCT] == 42.0 and job.metrics[names.GPU_ENERGY_J] == 12.0
    assert history(client, old, names.GPU_ENERGY_J) == [(1, 10.0), (2, 12.0)]
    assert job_from_run(client.get_run(new)).metrics[names.OTHER_CPU_MEAN_PCT] == 7.0
    assert history(client, new, names.GPU_ENERGY_J) == []
