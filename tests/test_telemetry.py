"""Telemetry: the sampler, energy accounting and summaries through a fake NVML at the hardware
boundary (real nvidia-ml-py error classes), the no-driver path for real on this machine, and real
CLI jobs (ok, oom, killed) that log host telemetry, its artifacts and the machine's fingerprint."""
from __future__ import annotations

import csv
import io
import json
import time

import psutil
import pynvml
import pytest
import torch

from conftest import TEST_CONF, cli_in_process, runs, store
from fake_nvml import Clock, FakeNVML
from sweeps.provenance import machine
from sweeps.telemetry import nvml as telemetry_nvml
from sweeps.telemetry.sampler import Telemetry, for_job
from sweeps.telemetry.plot import MAX_SHADED_EPOCHS, figure, render
from sweeps.job.finish import FIGURE_MIN_SAMPLES

PNG = b"\x89PNG\r\n\x1a\n"


def _script(fake: FakeNVML, clock: Clock, gpus=("GPU-fake-0",)) -> tuple[Telemetry, dict]:
    """start at t=0, epoch 1 from t=1 to t=4 with samples at t=2 and 3, stop at t=5. The thread's
    interval (1000 s) never comes: every sample is one the test takes, at a known time."""
    tel = Telemetry(1000, list(gpus), nvml=fake, clock=clock)
    clock.t = 0
    tel.start()
    clock.t = 1
    tel.epoch_start(1)
    for clock.t in (2, 3):
        tel.sample()
    clock.t = 4
    metrics = tel.epoch_end(1)
    clock.t = 5
    tel.stop()
    return tel, metrics


def test_epoch_summaries_and_energy_from_the_counter():
    clock = Clock()
    fake = FakeNVML(clock)
    tel, m = _script(fake, clock)
    # window t = 1..4: means of levels are time-weighted, rates skip the window's first sample
    assert m["system/gpu/sm_clock_mhz"] == pytest.approx(1250)  # 1000 + 100 t, mean over [1, 4]
    assert m["system/gpu/mem_clock_mhz"] == pytest.approx(1215)
    assert m["system/gpu/util_pct"] == pytest.approx(30)  # samples at t = 2, 3, 4: 20, 30, 40 %
    assert m["system/gpu/power_w"] == pytest.approx(450)  # 200 + 100 t
    assert m["system/gpu/temp_max_c"] == 44 and m["system/gpu/mem_used_max_mb"] == pytest.approx(1400)
    assert m["system/gpu/fan_pct"] == 30
    assert m["system/gpu/throttle_frac"] == pytest.approx(0.25)  # sw_power_cap at t = 3 only
    assert m["system/gpu/energy_j"] == pytest.approx(200 * 3 + 50 * (16 - 1), abs=1e-3)  # counter e(4) - e(1)
    assert {"system/host/cpu_pct", "system/host/rss_max_mb", "system/host/sys_mem_used_max_mb"} <= set(m)
    s = tel.summary(train_samples=100)
    assert s["energy/total_j"] == pytest.approx(200 * 5 + 50 * 25, abs=1e-3)  # start (t=0) to stop (t=5)
    assert s["energy/train_j"] == pytest.approx(1350, abs=1e-3)
    assert s["energy/j_per_sample"] == pytest.approx(13.5, abs=1e-5)
    tags = tel.tags()
    assert tags["job.telemetry"].startswith("GPU and host (NVML + psutil, every 1000 s): Fake GPU 0")
    assert tags["job.energy_method"] == "counter"
    assert tags["job.throttle_reasons"] == "gpu_idle, sw_power_cap"
    assert fake.open == 0  # nvmlShutdown after nvmlInit


def test_energy_by_power_integration_where_the_counter_is_not_supported():
    clock = Clock()
    fake = FakeNVML(clock, unsupported={"nvmlDeviceGetTotalEnergyConsumption"})
    tel, m = _script(fake, clock)
    assert m["system/gpu/energy_j"] == pytest.approx(1350)  # ∫ (200 + 100 t) dt over [1, 4]: trapezoids are exact
    assert tel.summary(100)["energy/total_j"] == pytest.approx(2250)
    assert tel.tags()["job.energy_method"] == "power_integration"
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1  # asked once, then left out


def test_a_field_the_gpu_does_not_support_is_left_out_and_a_transient_error_skips_one_sample():
    clock = Clock()
    fake = FakeNVML(clock, unsupported={"nvmlDeviceGetFanSpeed"})
    fake.fail_next["nvmlDeviceGetPowerUsage"] = pynvml.NVMLError_Unknown()  # the start sample's power
    tel, m = _script(fake, clock)
    assert "system/gpu/fan_pct" not in m and m["system/gpu/power_w"] == pytest.approx(450)
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 1
    assert "not supported: gpu0 fan_pct" in tel.tags()["job.telemetry"]
    table = list(csv.DictReader(io.StringIO(tel.csv())))
    assert "gpu0_fan_pct" not in table[0] and table[0]["gpu0_power_w"] == "" and table[1]["gpu0_power_w"] == "300.0"


def test_several_gpus_add_power_and_energy_and_report_the_hottest():
    clock = Clock()
    tel, m = _script(FakeNVML(clock, gpus=2), clock, gpus=("GPU-fake-0", "GPU-fake-1"))
    assert m["system/gpu/power_w"] == pytest.approx(900) and m["system/gpu/energy_j"] == pytest.approx(2700, abs=1e-3)
    assert m["system/gpu/temp_max_c"] == 45 and m["system/gpu/util_pct"] == pytest.approx(30)


def test_csv_has_one_row_per_sample_with_epoch_edges():
    clock = Clock()
    tel, _ = _script(FakeNVML(clock), clock)
    table = list(csv.DictReader(io.StringIO(tel.csv())))
    assert len(table) == len(tel.rows) == 6
    assert [r["mark"] for r in table] == ["start", "epoch_start", "", "", "epoch_end", "stop"]
    assert [r["epoch"] for r in table] == ["", "1", "1", "1", "1", ""]
    assert [float(r["t_s"]) for r in table] == [0, 1, 2, 3, 4, 5]
    assert float(table[0]["gpu0_energy_j"]) == 0 and float(table[-1]["gpu0_energy_j"]) == pytest.approx(2250)
    assert table[0]["cpu_pct"] == "" and float(table[0]["rss_mb"]) > 0


def test_figures_are_png_for_gpu_and_for_host_only():
    clock = Clock()
    tel, _ = _script(FakeNVML(clock), clock)
    gpu_png = render(tel, "model=mlp batch=64")
    host = Telemetry(1000).start()
    host.epoch_start(1)
    host.epoch_end(1)
    host.stop()
    host_png = render(host, "cpu job")
    assert gpu_png.startswith(PNG) and host_png.startswith(PNG)
    assert len(gpu_png) > len(host_png) > 5_000  # five GPU panels more than the host's two


def test_no_library_turns_gpu_telemetry_off_with_the_reason():
    fake = FakeNVML(Clock(), init_error=pynvml.NVMLError_LibraryNotFound())
    tel = Telemetry(1000, ["GPU-fake-0"], nvml=fake).start()
    tel.epoch_start(1)
    m = tel.epoch_end(1)
    tel.stop()
    assert not tel.handles and not any(k.startswith("system/gpu/") for k in m) and "system/host/rss_max_mb" in m
    assert tel.summary(10) == {}
    assert tel.tags() == {"job.telemetry": "host only (psutil, every 1000 s); GPU off: no NVML "
                                       "(NVMLError_LibraryNotFound: NVML Shared Library Not Found)"}


def test_a_gpu_nvml_cannot_find_turns_gpu_telemetry_off():
    fake = FakeNVML(Clock())
    tel = Telemetry(1000, ["GPU-elsewhere"], nvml=fake).start()
    tel.stop()
    assert "GPU off: GPU GPU-elsewhere not found in NVML (NVMLError_NotFound" in tel.tags()["job.telemetry"]
    assert fake.open == 0


def test_no_driver_here_for_real():
    if not telemetry_nvml.nvml_problem():
        pytest.skip("NVML works on this machine")
    tel = Telemetry(1000, [0]).start()  # the real nvidia-ml-py
    tel.stop()
    assert "GPU off: no NVML (NVMLError_" in tel.tags()["job.telemetry"]
    cpu = for_job(1000, torch.device("cpu"))
    cpu.stop()
    assert "GPU off: the job runs on cpu; no NVML (NVMLError_" in cpu.tags()["job.telemetry"]
    assert machine.fingerprint()["nvml"].startswith("NVMLError_") and machine.environment_tags()["env.driver"] == "none"


def test_fingerprint_reads_driver_cuda_and_power_limit_from_nvml():
    fake = FakeNVML(Clock(), gpus=2, unsupported={"nvmlDeviceGetPciInfo"})
    info = machine._nvml(fake)
    assert info["driver"] == "580.65.06" and info["cuda_driver"] == "13.0" and fake.open == 0
    gpu1 = info["gpus"]["GPU-fake-1"]
    assert gpu1["name"] == "Fake GPU 1" and gpu1["power_limit_w"] == 700 and gpu1["memory_gb"] == 85.9
    assert gpu1["max_sm_clock_mhz"] == 1980 and gpu1["pci_bus_id"] is None  # not supported: left out
    assert machine._nvml(FakeNVML(Clock(), init_error=pynvml.NVMLError_LibraryNotFound())) == {
        "problem": "NVMLError_LibraryNotFound: NVML Shared Library Not Found"}


def test_a_cuda_job_samples_its_gpu_through_the_module_telemetry_imports(monkeypatch):
    fake = FakeNVML(time.monotonic)
    monkeypatch.setattr(telemetry_nvml, "pynvml", fake)  # where sweeps.telemetry.sampler finds nvidia-ml-py
    # no CUDA UUID (as on a machine without CUDA): found by index. On a GPU machine torch's real
    # UUID would name a GPU the fake does not have
    monkeypatch.setattr(telemetry_nvml, "device_uuid", lambda index: None)
    tel = for_job(1000, torch.device("cuda", 0))
    tel.epoch_start(1)
    m = tel.epoch_end(1)
    tel.stop()
    assert tel.names == ["Fake GPU 0"] and "system/gpu/energy_j" in m and "system/gpu/power_w" in m
    assert fake.open == 0


def test_interval_zero_is_off():
    tel = Telemetry(0, ["GPU-fake-0"], nvml=FakeNVML(Clock())).start()
    tel.epoch_start(1)
    assert tel.epoch_end(1) == {} and tel.rows == [] and tel.summary(10) == {}
    tel.stop()
    assert tel.tags() == {"job.telemetry": "off (telemetry.interval_s=0)"}


def test_the_thread_samples_on_its_interval_and_stops():
    tel = Telemetry(0.02, []).start()
    time.sleep(0.3)
    tel.stop()
    n = len(tel.rows)
    assert 4 <= sum(1 for r in tel.rows if r[3] == "") <= 20
    time.sleep(0.05)
    assert len(tel.rows) == n and not tel._thread.is_alive()


def test_config_defaults_and_a_negative_interval_is_bad_input():
    from hydra import compose, initialize_config_dir

    from sweeps import config
    from sweeps.errors import UsageError

    config.register()
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        default = compose("config")
        bad = compose("config", overrides=["telemetry.interval_s=-1"])
    assert default.telemetry.interval_s == 1.0 and default.telemetry.figure is True
    with pytest.raises(UsageError, match=r"telemetry.interval_s=-1\.0 is not valid"):
        config.validate(bad)


@pytest.fixture(scope="module")
def cli_sweep(tmp_path_factory):
    """Three real CPU jobs in one process: an OOM, an ok job, and one interrupted in epoch 2
    (KeyboardInterrupt, which ends the sweep)."""
    cwd = tmp_path_factory.mktemp("telemetry_sweep")
    args = ["-m", "model=oom_above,mlp,interrupt_after", "batch=64", "dataset=synthetic", "dataset.shape=[1,8,8]",
            "dataset.train_size=128", "dataset.test_size=32", "epochs=2", "device=cpu", TEST_CONF,
            "telemetry.interval_s=0.02"]  # enough samples for telemetry.png in a short job
    proc = cli_in_process(args, cwd)
    return cwd, proc, {r.data.tags["sweeps.overrides"]: r for r in runs(cwd) if "mlflow.parentRunId" in r.data.tags}


@pytest.mark.slow  # a sweep of three jobs sampled every 0.02 s: ~6 s on 2 cores
def test_cli_jobs_log_host_telemetry_and_say_why_gpu_is_off(cli_sweep):
    cwd, proc, jobs = cli_sweep
    assert set(jobs) == {"model=oom_above", "model=mlp", "model=interrupt_after"}, proc.stderr[-3000:]
    client = store(cwd)
    ok = jobs["model=mlp"]
    assert ok.data.tags["job.telemetry"].startswith("host only (psutil, every 0.02 s); GPU off: the job runs on cpu")
    # a machine's trait, said once per sweep (every job's run keeps it in its tag)
    assert proc.stdout.count("telemetry: host only") + proc.stderr.count("telemetry: host only") == 1
    assert all(r.data.tags["job.telemetry"] == ok.data.tags["job.telemetry"] for r in jobs.values())
    for key in ("system/host/cpu_pct", "system/host/rss_max_mb", "system/host/sys_mem_used_max_mb"):
        # epoch 1 always has its edge samples; epoch 2 (a few ms) only if 50 ms passed since the last
        assert 1 in [m.step for m in client.get_metric_history(ok.info.run_id, key)], key
    assert not any(k.startswith(("system/gpu/", "energy/")) for k in ok.data.metrics)
    fp = json.loads(open(client.download_artifacts(ok.info.run_id, "fingerprint.json", str(cwd))).read())
    # the machine's GPUs, whatever device the job ran on (an H100 machine listed its one)
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert fp["torch"] == torch.__version__ and fp["cpu"]["cores"] and fp["ram_gb"] > 0 and len(fp["gpus"]) == cuda
    for tag in ("env.cudnn", "env.cuda_driver", "env.power_limit_w", "env.gpu_memory_gb", "env.os"):
        assert ok.data.tags[tag], tag


@pytest.mark.slow  # a sweep of three jobs sampled every 0.02 s: ~6 s on 2 cores
@pytest.mark.parametrize("job", ["model=mlp", "model=oom_above", "model=interrupt_after"])
def test_cli_sampler_stops_and_logs_artifacts_on_every_outcome(cli_sweep, job):
    cwd, _, jobs = cli_sweep
    run = jobs[job]
    assert run.data.tags["outcome"] == {"model=mlp": "ok", "model=oom_above": "oom"}.get(job, "killed")
    client = store(cwd)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"telemetry.csv", "fingerprint.json"} <= artifacts
    table = list(csv.DictReader(open(client.download_artifacts(run.info.run_id, "telemetry.csv", str(cwd)))))
    assert table[0]["mark"] == "start" and table[-1]["mark"] == "stop"  # stopped, then logged
    # the figure needs a curve: jobs with fewer samples keep them in telemetry.csv alone
    assert ("telemetry.png" in artifacts) == (len(table) >= FIGURE_MIN_SAMPLES), len(table)
    if job == "model=mlp":  # 2 epochs at a 0.02 s interval: a curve
        assert "telemetry.png" in artifacts, len(table)
        with open(client.download_artifacts(run.info.run_id, "telemetry.png", str(cwd)), "rb") as f:
            assert f.read(8) == PNG


def test_epochs_shorter_than_the_edge_gap_skip_their_edge_samples_and_energy():
    """A sample costs ~0.15 ms: a 1-ms epoch must not pay two. The first epoch always gets its
    edges; an epoch that follows a long one gets them however soon it starts (a GPU job's short
    evaluation between epochs: on an H100 a 2-epoch job lost its energy/train_j without this);
    after a short epoch, only when the last sample is at least EDGE_GAP_S old. An epoch without
    its edges has no energy figure (and then the job has no energy/train_j)."""
    from sweeps.telemetry.sampler import EDGE_GAP_S

    clock = Clock()
    tel = Telemetry(1000, ["GPU-fake-0"], nvml=FakeNVML(clock), clock=clock)
    tel.start()
    clock.t = 1
    tel.epoch_start(1)
    clock.t = 2
    assert "system/gpu/energy_j" in tel.epoch_end(1)
    clock.t += EDGE_GAP_S / 10  # a short evaluation
    tel.epoch_start(2)  # after a 1-s epoch: edges, however soon
    clock.t += EDGE_GAP_S / 10
    assert "system/gpu/energy_j" in tel.epoch_end(2)
    tel.epoch_start(3)  # right after a short epoch's end sample: no edge
    clock.t += EDGE_GAP_S / 10
    assert "system/gpu/energy_j" not in tel.epoch_end(3)
    clock.t += 1
    tel.epoch_start(4)  # a second later: edges again
    clock.t += 1
    assert "system/gpu/energy_j" in tel.epoch_end(4)
    tel.stop()
    assert [w.exact for w in tel.windows] == [True, True, False, True]
    assert sum(1 for r in tel.rows if r[3] in ("epoch_start", "epoch_end")) == 6
    assert "energy/train_j" not in tel.summary(100) and "energy/total_j" in tel.summary(100)


def test_short_epochs_on_the_host_alone_take_no_edge_samples_after_the_first():
    """Without a GPU there is no energy counter to read at an epoch's edges: a job of 1-ms
    epochs (study 5 on the CPU) pays no sample at them however old the last sample is — only
    the first epoch and an epoch after a long one get theirs — and its host figures still come
    from the sampler's rows inside an epoch."""
    from sweeps.telemetry.sampler import EDGE_GAP_S

    clock = Clock()
    tel = Telemetry(1000, [], clock=clock)
    tel.start()
    for epoch in range(1, 301):  # 300 epochs of 1 ms: 0.3 s, six times EDGE_GAP_S
        tel.epoch_start(epoch)
        clock.t += 0.001
        if epoch == 150:
            tel.sample()  # the sampler thread's row, inside epoch 150
            clock.t += 0.001
        metrics = tel.epoch_end(epoch)
        assert ("system/host/cpu_pct" in metrics) == (epoch in (1, 150)), epoch
    assert clock.t > 5 * EDGE_GAP_S  # the last sample grew older than the edge gap many times over
    tel.epoch_start(301)  # a long epoch: the next one gets its edges
    clock.t += 2 * EDGE_GAP_S
    tel.epoch_end(301)
    tel.epoch_start(302)
    clock.t += 0.001
    tel.epoch_end(302)
    tel.stop()
    assert [w.exact for w in tel.windows].count(True) == 2  # epochs 1 and 302
    assert [r[3] for r in tel.rows].count("epoch_start") == 2


def test_a_job_of_long_epochs_with_short_evaluations_between_them_has_its_training_energy():
    """Every epoch of ≥ EDGE_GAP_S with its edges, so the job's energy/train_j is the sum of
    its epochs' counter differences (what the GPU self-check found missing on an H100)."""
    from sweeps.telemetry.sampler import EDGE_GAP_S

    clock = Clock()
    tel = Telemetry(1000, ["GPU-fake-0"], nvml=FakeNVML(clock), clock=clock)
    tel.start()
    per_epoch = []
    for epoch in range(1, 4):
        clock.t += EDGE_GAP_S / 20  # evaluation
        tel.epoch_start(epoch)
        clock.t += 0.5
        per_epoch.append(tel.epoch_end(epoch)["system/gpu/energy_j"])
    tel.stop()
    assert tel.summary(300)["energy/train_j"] == pytest.approx(sum(per_epoch))
    assert all(w.exact for w in tel.windows)


def test_where_the_energy_read_takes_ms_edge_samples_stay_within_two_percent_of_training(caplog):
    """An H200 VM's driver answered the energy counter in 3.6 ms: two edge samples every 50 ms
    would take ~15 % of a job of 2-ms epochs (study 5 on the GPU), on the training thread. The
    gap grows to EDGE_COST_RATIO × the measured cost (0.36 s): 2-ms epochs pay two samples per
    0.36 s (≤ 2 %), an epoch at least that long still earns the next its edges (and energy), and
    the log says once why shorter epochs have no energy figure."""
    from sweeps.telemetry.sampler import EDGE_COST_RATIO, EDGE_GAP_S

    read_s = 0.0036
    clock = Clock()
    tel = Telemetry(1000, ["GPU-fake-0"], nvml=FakeNVML(clock, energy_read_s=read_s), clock=clock)
    tel.start()
    with caplog.at_level("INFO", logger="sweeps"):
        t0, edges_before = clock.t, len(tel.rows)
        for epoch in range(1, 501):  # 500 epochs of 2 ms of training each
            tel.epoch_start(epoch)
            clock.t += 0.002
            tel.epoch_end(epoch)
        training_s = 500 * 0.002
        edge_s = (len(tel.rows) - edges_before) * read_s
        assert tel.edge_gap_s() == pytest.approx(EDGE_COST_RATIO * read_s)
        assert edge_s / training_s <= 0.03, (len(tel.rows) - edges_before, clock.t - t0)
        assert (len(tel.rows) - edges_before) > 2  # still sampled, at the wider gap
        tel.epoch_start(501)  # an epoch longer than the gap: the next one has its edges and energy
        clock.t += 2 * tel.edge_gap_s()
        tel.epoch_end(501)
        clock.t += EDGE_GAP_S / 10  # a short evaluation
        tel.epoch_start(502)
        clock.t += 2 * tel.edge_gap_s()
        assert "system/gpu/energy_j" in tel.epoch_end(502)
    tel.stop()
    notes = [r.getMessage() for r in caplog.records if "epoch-edge sample takes" in r.getMessage()]
    assert len(notes) == 1 and "3.6 ms" in notes[0] and "0.36 s" in notes[0], notes


def test_with_a_fast_energy_read_the_edge_gap_stays_at_its_floor_through_a_stalled_sample():
    """A driver that answers in µs keeps EDGE_GAP_S: epochs of ≥ 50 ms all have their edges and
    energy, as before — also when one edge sample stalls for 40 ms (a busy core): the gap follows
    the median of the last edge samples' costs, not that one, so no epoch loses its energy and
    the job keeps energy/train_j."""
    from sweeps.telemetry.sampler import EDGE_GAP_S

    clock = Clock()
    fake = FakeNVML(clock, energy_read_s=20e-6)
    tel = Telemetry(1000, ["GPU-fake-0"], nvml=fake, clock=clock)
    tel.start()
    for epoch in range(1, 8):
        fake.energy_read_s = 0.04 if epoch == 3 else 20e-6  # epoch 3's start edge stalls
        tel.epoch_start(epoch)
        clock.t += EDGE_GAP_S
        assert "system/gpu/energy_j" in tel.epoch_end(epoch), epoch
        assert tel.edge_gap_s() == EDGE_GAP_S, epoch
        clock.t += EDGE_GAP_S / 10
    tel.stop()
    assert all(w.exact for w in tel.windows) and "energy/train_j" in tel.summary(7)


def test_the_machine_cpu_pct_of_a_sample_spans_the_time_since_the_previous_row_on_any_thread(monkeypatch):
    """psutil.cpu_percent(None) keeps its reference point per thread (psutil 5.9+: a dict keyed by
    thread id), and samples are taken on the main thread (start, epoch edges) and on the sampler's
    thread: the sampler keeps its own previous cpu_times, so each row's machine-wide CPU % covers
    exactly the gap to the row before it, the span the ``rate`` mean weights it by. cpu_times is
    scripted (Linux: guest time is already counted in user, iowait is not busy)."""
    if "guest" not in type(psutil.cpu_times())._fields:
        pytest.skip("psutil's Linux CPU times")
    import threading

    Times = type(psutil.cpu_times())  # this platform's fields

    def at(**seconds):
        return Times(**{f: float(seconds.get(f, 0)) for f in Times._fields})

    script = [at(),  # start
              at(user=1, idle=2, iowait=1),  # thread: 1 busy of 4 → 25 %
              at(user=4, idle=3, iowait=1, guest=1),  # main: 3 of 4 (user 3, of which guest 1) → 75 %
              at(user=4, system=2, idle=5, iowait=1, guest=1),  # thread: 2 of 4 → 50 %
              at(user=4, system=2, idle=5, iowait=1, guest=1)]  # main: nothing elapsed → 0 %
    calls = []
    monkeypatch.setattr(psutil, "cpu_times",
                        lambda percpu=False: calls.append(1) or script[min(len(calls), len(script)) - 1])

    def on_thread():
        t = threading.Thread(target=tel.sample)
        t.start()
        t.join()

    tel = Telemetry(1000).start()
    on_thread()
    tel.sample()
    on_thread()
    tel.sample()
    tel.stop()
    col = tel.columns.index("sys_cpu_pct")
    assert [r[col] for r in tel.rows[:5]] == [None, 25.0, 75.0, 50.0, 0.0]


@pytest.mark.parametrize("epochs", [3, MAX_SHADED_EPOCHS + 1])
def test_the_figure_shades_each_epoch_until_they_are_too_many_then_one_band(epochs):
    """A few epochs: one shade per epoch and a labelled edge each. 10,000 sub-millisecond epochs
    (study 5) would be sub-pixel shades that took ~0.5 s to draw: one band over them instead,
    and the axis label says so."""
    clock = Clock()
    tel = Telemetry(1000, clock=clock)
    tel.start()
    for epoch in range(1, epochs + 1):
        clock.t += 0.5
        tel.epoch_start(epoch)
        clock.t += 1
        tel.epoch_end(epoch)
    tel.stop()
    from matplotlib.collections import PolyCollection  # broken_barh's shades (vlines: a LineCollection)

    ax = figure(tel).axes[-1]
    spans = sum(len(c.get_paths()) for c in ax.collections if isinstance(c, PolyCollection))
    assert spans == (epochs if epochs <= MAX_SHADED_EPOCHS else 1)
    assert ("too many to shade" in ax.get_xlabel()) == (epochs > MAX_SHADED_EPOCHS)
    assert render(tel).startswith(PNG)
