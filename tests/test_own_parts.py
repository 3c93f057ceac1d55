"""The user's own model, data, optimizer and loss, from the user's own folder (``--config-dir``),
through the one extension mechanism (Hydra ``_target_``), and the Python entry (``sweeps.run``,
``sweeps.results``). Every job runs for real in-process against a real sqlite store; the user's
modules are real files written into the test's folder and imported from there."""
from __future__ import annotations

import math
import shutil

import pytest

from conftest import REPO, cli_in_process, runs, store

TINY = ["dataset.train_size=128", "dataset.test_size=32", "device=cpu", "epochs=2"]


def _lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("sweeps: error:")]


@pytest.mark.slow  # 2 jobs, the report, sweeps.results and a rerun: ~6 s; the default run keeps the user-code tests below
def test_the_example_folder_runs_as_a_users_sweep_and_reads_back(tmp_path, user_folder, monkeypatch):
    """examples/own_model as a user runs it: their 1-D CNN, sequence dataset class, RMSprop from
    their YAML and their preset — both jobs ok, the runs named by their options, the report's
    table, and sweeps.results / sweeps.run give one row per job."""
    import sweeps
    from sweeps.report.__main__ import main as report

    shutil.copytree(REPO / "examples" / "own_model", tmp_path, dirs_exist_ok=True)
    user_folder({})
    args = ["--config-dir", "conf", "-m", "+experiment=waves_batch", "epochs=2", "dataset.n_train=256",
            "dataset.n_test=64"]
    proc = cli_in_process(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = [r for r in runs(tmp_path, "waves") if r.data.tags.get("sweeps.kind") != "sweep"]
    assert [r.data.tags["outcome"] for r in jobs] == ["ok", "ok"]
    assert {(r.data.params["model"], r.data.params["dataset"], r.data.params["optimizer"]) for r in jobs} == \
        {("conv1d", "waves", "rmsprop")}
    assert sorted(r.info.run_name.split(" #")[0] for r in jobs) == ["conv1d b32 cpu", "conv1d b64 cpu"]
    assert jobs[0].data.params["optimizer._target_"] == "torch.optim.RMSprop"
    assert jobs[0].data.params["data.input_shape"] == "1x128"  # read from the first example

    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    table = sweeps.results("waves", tracking_uri=uri)
    assert len(table) == 2 and {"outcome", "batch", "time/median_epoch_s"} <= set(table.columns)
    assert sorted(table["batch"]) == [32, 64] and (table["outcome"] == "ok").all()
    assert (table["time/median_epoch_s"] > 0).all()

    monkeypatch.chdir(tmp_path)
    assert report(["--experiment", "waves"]) == 0
    records = sweeps.run(["+experiment=waves_batch", "epochs=2", "dataset.n_train=256", "dataset.n_test=64"],
                         config_dir="conf")  # the same sweep again: both done, so skipped
    text = next((tmp_path / "reports").glob("*/report.md")).read_text()
    assert "| batch |" in text and "| 32 |" in text and "| 64 |" in text
    assert [r["outcome"] for r in records] == ["skipped", "skipped"]
    assert sorted(r["batch"] for r in records) == [32, 64]
    assert {r["run_id"] for r in records} == {r.info.run_id for r in jobs}


def test_adamw_with_warmup_cosine_logs_the_scaled_lr_and_warms_up(in_process, tmp_path):
    """Config alone: AdamW at lr = base_lr × batch / base_batch (logged ``lr``), the epochs' lr
    rising linearly from start_factor × lr over the warm-up, then annealed by the cosine."""
    outcome = in_process(["model=mlp", "dataset=synthetic", "dataset.shape=[1,8,8]", *TINY, "epochs=4", "batch=64",
                          "optimizer=adamw", "schedule=warmup_cosine", "schedule.warmup_epochs=2",
                          "lr_scaling=linear", "lr_scaling.base_batch=32"])
    assert outcome == "ok"
    run = runs(tmp_path)[-1]
    lr = 0.001 * 64 / 32
    assert math.isclose(run.data.metrics["lr"], lr)
    assert run.data.params["optimizer._target_"] == "torch.optim.AdamW"
    history = [m.value for m in sorted(store(tmp_path).get_metric_history(run.info.run_id, "train/lr"),
                                       key=lambda m: m.step)]
    expected = [0.1 * lr, 0.55 * lr, lr, lr / 2]  # LinearLR 0.1 → 1 over 2 epochs, then cosine over 2
    assert len(history) == 4 and all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(history, expected)), history


def test_an_optimizer_and_loss_given_only_in_the_users_yaml(tmp_path, user_folder):
    """``_target_: torch.optim.RMSprop`` in the user's conf/optimizer/ runs with config alone at
    the lr the scaling rule gives; the user's loss (L1) trains, and RMSE is still the root of the
    mean squared error, in target units."""
    user_folder({"conf/optimizer/rms.yaml": """\
        _target_: torch.optim.RMSprop
        _partial_: true
        base_lr: 0.01
        alpha: 0.9
        """, "conf/loss/l1.yaml": "_target_: torch.nn.L1Loss\n"})
    proc = cli_in_process(["--config-dir", "conf", "model=mlp_tabular", "dataset=diabetes", "optimizer=rms",
                           "loss=l1", "lr_scaling=sqrt", "lr_scaling.base_batch=16", "batch=64", "device=cpu",
                           "epochs=3"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = runs(tmp_path)[-1]
    assert run.data.tags["outcome"] == "ok"
    assert math.isclose(run.data.metrics["lr"], 0.01 * math.sqrt(64 / 16))
    assert (run.data.params["optimizer"], run.data.params["optimizer.alpha"]) == ("rms", "0.9")
    assert run.data.params["loss._target_"] == "torch.nn.L1Loss"
    # test/loss is the L1 loss (mean absolute error, standardised); RMSE in target units comes from
    # the squared errors: at least the MAE (same residuals), and not the root of the L1 loss
    from sweeps.data.builtin import diabetes

    scale = diabetes(0.2, seed=0)[2].target_scale
    loss, rmse = run.data.metrics["test/loss"], run.data.metrics["test/final_rmse"]
    assert rmse / scale >= loss and not math.isclose(rmse, math.sqrt(loss) * scale, rel_tol=0.01)


def test_a_users_dataset_class_with_inferred_spec(tmp_path, user_folder):
    """A dataset callable returning (train, test) of the user's own Dataset class: the input shape
    from the first example; int targets → classes counted (largest label + 1); scalar float
    targets → regression, shaped like the model's outputs. No files named: the identity is the
    config alone, with one warning line."""
    user_folder({"userpkg_seq/__init__.py": """\
        import torch
        from torch.utils.data import Dataset

        class Seq(Dataset):
            def __init__(self, n, length, regression, seed):
                g = torch.Generator().manual_seed(seed)
                self.x = torch.randn(n, 2, length, generator=g)
                self.y = self.x.mean((1, 2)) if regression else (self.x[:, 0, 0] > 0).long() * 4
            def __len__(self):
                return len(self.x)
            def __getitem__(self, i):
                return self.x[i], (float(self.y[i]) if self.y.is_floating_point() else int(self.y[i]))

        def make(n_train, length, regression=False, seed=0):
            return Seq(n_train, length, regression, seed), Seq(32, length, regression, seed + 1)
        """, "conf/dataset/seq.yaml": """\
        _target_: userpkg_seq.make
        n_train: 96
        length: 12
        """})
    base = ["--config-dir", "conf", "model=mlp", "model.hidden=[16]", "dataset=seq", "device=cpu", "epochs=2",
            "batch=32"]
    proc = cli_in_process(base, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dataset=seq names no files" in proc.stdout + proc.stderr  # the job's log (Hydra: stdout)
    run = runs(tmp_path)[-1]
    assert run.data.tags["outcome"] == "ok" and run.data.tags["sweeps.data_fingerprint"] == "config-only"
    assert run.data.params["data.input_shape"] == "2x12" and run.data.params["dataset.name"] == "seq"
    assert "test/final_acc" in run.data.metrics  # labels 0 and 4: five classes, accuracy logged
    proc = cli_in_process([*base, "+dataset.regression=true"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = runs(tmp_path)[-1]
    assert run.data.tags["outcome"] == "ok" and "test/final_rmse" in run.data.metrics


def test_a_gru_over_tokens_with_a_loss_function_trains_and_counts_its_flops(tmp_path, user_folder):
    """The user's GRU over integer token ids (a dataset callable of int64 sequences) and the
    user's loss as a plain function ``(output, target) -> scalar`` with a key of its own: the job
    is ok, its loss is that function's, and the FLOPs are counted on the real int64 input —
    ``perf/flops_per_example`` and per-epoch ``perf/flops_per_s``. On the CPU no datasheet peak
    exists, so no ``perf/mfu``: tag ``perf.peak`` says so (a known GPU adds it; sweeps.train.flops)."""
    user_folder({"userpkg_tok/__init__.py": """\
        import torch
        from torch import nn

        class Gru(nn.Module):
            def __init__(self, in_shape, num_outputs, vocab=20, dim=8):
                super().__init__()
                self.emb, self.gru = nn.Embedding(vocab, dim), nn.GRU(dim, dim, batch_first=True)
                self.head = nn.Linear(dim, num_outputs)
            def forward(self, x):
                return self.head(self.gru(self.emb(x))[0][:, -1])

        def tokens(n_train=64, length=6, seed=0):
            g = torch.Generator().manual_seed(seed)
            def part(n):
                x = torch.randint(0, 20, (n, length), generator=g)
                return torch.utils.data.TensorDataset(x, (x[:, 0] % 2).long())
            return part(n_train), part(16)

        def scaled_ce(output, target, scale=1.0):
            return scale * nn.functional.cross_entropy(output, target)
        """, "conf/model/gru.yaml": "_target_: userpkg_tok.Gru\n",
        "conf/dataset/tokens.yaml": "_target_: userpkg_tok.tokens\n",
        "conf/loss/scaled.yaml": "_target_: userpkg_tok.scaled_ce\nscale: 1000.0\n"})
    proc = cli_in_process(["--config-dir", "conf", "model=gru", "dataset=tokens", "loss=scaled", "device=cpu",
                           "epochs=1", "batch=32", "telemetry.interval_s=0"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FLOPs not counted" not in proc.stdout + proc.stderr
    run = runs(tmp_path)[-1]
    metrics = run.data.metrics
    assert run.data.tags["outcome"] == "ok" and run.data.params["loss._target_"] == "userpkg_tok.scaled_ce"
    assert metrics["test/loss"] > 100  # cross-entropy of 2 classes (~0.7) × scale 1000: the function's own
    assert metrics["perf/flops_per_example"] > 0 and metrics["perf/flops_per_s"] > 0
    assert "perf/mfu" not in metrics and "MFU omitted" in run.data.tags["job.peak"]


@pytest.mark.parametrize("files, overrides, says", [
    ({"conf/model/ghost.yaml": "_target_: userpkg_ghost.Net\n"}, ["model=ghost"],
     ["model=ghost", "userpkg_ghost.Net cannot be imported", "No module named 'userpkg_ghost'"]),
    ({}, ["model=mlp", "+model.widht=3"], ["model=mlp", "sweeps.models.MLP rejects its arguments", "widht"]),
    ({"userpkg_one/__init__.py": "import torch\ndef one():\n    return torch.utils.data.TensorDataset("
                                 "torch.zeros(4, 2), torch.zeros(4))\n",
      "conf/dataset/one.yaml": "_target_: userpkg_one.one\n"}, ["dataset=one"],
     ["dataset=one", "userpkg_one.one returned a TensorDataset", "return (train, test)"]),
    ({"conf/optimizer/bad.yaml": "_target_: torch.optim.SGD\n_partial_: true\nbase_lr: 0.1\nmomentun: 0.9\n"},
     ["optimizer=bad"], ["optimizer=bad", "torch.optim.SGD rejects its arguments", "momentun"]),
    ({"conf/optimizer/both.yaml": "_target_: torch.optim.SGD\n_partial_: true\nlr: 0.05\nbase_lr: 0.1\n"},
     ["optimizer=both"], ["optimizer=both", "both lr: 0.05 and base_lr: 0.1", "keep one"]),
    ({"conf/loss/fn.yaml": "_target_: torch.nn.functional.cross_entropy\n_partial_: true\n"
                           "label_smothing: 0.1\n"}, ["loss=fn"],
     ["loss=fn", "torch.nn.functional.cross_entropy rejects its arguments", "label_smothing"]),
    ({"conf/experiment/mine.yaml": "# @package _global_\ndevice: cpu\n"}, ["+experiment=mine"],
     ["`device: cpu` in experiment/mine sets a config group", "`- override /device: cpu` under its `defaults:`"]),
    ({"conf/experiment/mine.yaml": "# @package _global_\nmodel: mlp\n"}, ["+experiment=mine"],
     ["`model: mlp` in experiment/mine sets a config group", "`- override /model: mlp` under its `defaults:`"]),
    ({}, ["--config-dir", "nowhere"], ["nowhere", "not found"]),
], ids=["target-not-importable", "constructor-rejects", "dataset-returns-one", "optimizer-typo", "optimizer-both-lrs",
        "loss-function-typo", "preset-device-key", "preset-model-key", "no-config-dir"])
def test_bad_input_in_user_code_is_one_line_and_exit_2(tmp_path, user_folder, files, overrides, says):
    """Before any run is opened: one ``sweeps: error:`` line naming the option, the target and
    the cause, exit 2, no traceback, no job run in the store."""
    user_folder(files)
    config_dir = [] if "--config-dir" in overrides else ["--config-dir", "conf"]
    (tmp_path / "conf").mkdir(exist_ok=True)
    data = [] if any(o.startswith("dataset=") for o in overrides) else ["dataset=synthetic", "dataset.shape=[1,8,8]"]
    proc = cli_in_process([*config_dir, *data, *TINY, *overrides], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = _lines(proc)
    assert len(lines) == 1, proc.stderr[-3000:]
    for part in says:
        assert part in lines[0], lines[0]
    client = store(tmp_path)
    exp = client.get_experiment_by_name("sweeps")
    assert exp is None or not client.search_runs([exp.experiment_id])


def test_a_users_model_that_raises_in_forward_is_an_error_outcome_and_the_sweep_goes_on(tmp_path, user_folder):
    user_folder({"userpkg_bad/__init__.py": """\
        from torch import nn

        class Net(nn.Module):
            def __init__(self, in_shape, num_outputs):
                super().__init__()
                self.fc = nn.Linear(1, num_outputs)
            def forward(self, x):
                raise ValueError("my forward is broken")
        """, "conf/model/bad.yaml": "_target_: userpkg_bad.Net\n"})
    proc = cli_in_process(["--config-dir", "conf", "-m", "model=bad,mlp", "dataset=synthetic",
                           "dataset.shape=[1,8,8]", *TINY], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    jobs = [r for r in runs(tmp_path) if r.data.tags.get("sweeps.kind") != "sweep"]
    assert [r.data.tags["outcome"] for r in jobs] == ["error", "ok"]
    assert jobs[0].data.tags["error"] == "ValueError: my forward is broken"
