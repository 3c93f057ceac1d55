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


def test_a_run_logged_before_the_batch_metric_and_the_job_tags_took_their_names_still_reads(tmp_path):
    """The batch size's metric was ``batch_size`` and the job's condition tags were bare or
    ad-hoc (``torch.threads``, ``compiled``, ...): the report reads them under today's names."""
    seed_store(tmp_path)
    client = store(tmp_path)
    exp = client.create_experiment("old")
    old = client.create_run(exp, tags={"outcome": "ok", "torch.threads": "1 (device.threads; 2 cores)",
                                       "compiled": "true", "data.loader": "device"}).info.run_id
    client.log_metric(old, "batch_size", 64.0, step=0)
    job = job_from_run(client.get_run(old))
    assert job.batch == 64.0
    assert job.tags[names.THREADS_TAG] == "1 (device.threads; 2 cores)" and job.tags[names.COMPILED_TAG] == "true"
    assert job.tags[names.LOADER_TAG] == "device"
    assert all(new.startswith("job.") for new in names.FORMER_TAGS)
