"""Every name a user types or reads: outcomes, MLflow tags and metrics, config group options.

The tracker, the console, the report and the README use these names and no others (a test
compares this module with the README and docs/). Torch-free on purpose: the report and tests import it
without loading torch. Units are in the names: ``_s`` seconds, ``_ms`` milliseconds, ``_mb``
MB (2**20 bytes), ``_j`` joules, ``_w`` watts, ``_pct`` percent, ``_mhz`` MHz, ``_c`` °C.
"""
from __future__ import annotations

# ── outcomes: how a job ended (tag ``outcome``) ─────────────────────────────────────────────
OK, OOM, DIVERGED, ERROR, UNAVAILABLE, KILLED = "ok", "oom", "diverged", "error", "unavailable", "killed"
OUTCOMES = (OK, OOM, DIVERGED, ERROR, UNAVAILABLE, KILLED)
SKIPPED = "skipped"  # not an outcome of a run: a job already done in an earlier run (resume)
RUNNING = "running"  # the outcome tag while a job runs
DONE = (OK, OOM)  # outcomes that a rerun of the same config skips
# MLflow run status per outcome (docs/reading-results.md, "MLflow"): FAILED — the job ran and did not get through its
# work (a crash, out of memory, a NaN loss); KILLED — it was stopped or never started for a reason
# outside it (a signal; no GPU or data here); FINISHED — ok only, so the run list's green tick means
# a usable result. The outcome tag stays the precise word; resume reads the tag, never the status.
RUN_STATUS = {OK: "FINISHED", ERROR: "FAILED", OOM: "FAILED", DIVERGED: "FAILED", UNAVAILABLE: "KILLED", KILLED: "KILLED"}

# ── options of the closed config groups (conf/<group>/<option>.yaml; a test checks both agree) ──
# The _target_ groups (model, dataset, optimizer, schedule, loss) are open: an option is any YAML
# file in conf/<group>/ or the user's --config-dir (`python -m sweeps --help` lists them).
GROUP_OPTIONS: dict[str, tuple[str, ...]] = {
    "device": ("auto", "cpu", "cuda", "ddp"),
    "lr_scaling": ("linear", "sqrt", "none"),
    "precision": ("fp32", "tf32", "bf16", "fp16"),
    "task": ("train", "inference", "max_batch"),
}
TARGET_GROUPS = ("model", "dataset", "optimizer", "schedule", "loss")  # each option a Hydra _target_
LOADERS = ("auto", "dataloader", "device")  # auto: device for tensors in memory, else dataloader
TIMING_MODES = ("events", "sync", "naive")
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "loop")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DDP_BACKENDS = ("auto", "nccl", "gloo")
PHASES = ("data", "forward", "backward", "optimizer")  # the timed phases of a training step

# ── tags ────────────────────────────────────────────────────────────────────────────────────
# The tag scheme (docs/reading-results.md, "Tags"): outcome and error bare (what every job run is
# filtered by); job.* how the job ran (its conditions: loader, threads, lr source, compiled, ...);
# diag.* what holds the job back; env.* the machine; slurm.* the Slurm job; sweeps.* the tool's
# bookkeeping (identity, ownership, the sweep's structure and verdict); mlflow.* MLflow's own.
OUTCOME_TAG, ERROR_TAG = "outcome", "error"
OVERRIDES_TAG = "sweeps.overrides"  # the job's swept key=value pairs
HASH_TAG = "sweeps.config_hash"  # a job's identity (resume): its config, data, hardware and the user's code
DATA_TAG = "sweeps.data_fingerprint"  # the data part of the identity (sweeps.data.fingerprint)
HARDWARE_TAG = "sweeps.hardware"  # the hardware part: host / device model
CODE_TAG = "sweeps.code_fingerprint"  # the user's code part (sweeps.provenance.user_code); absent for built-in targets
CODE_FILES_TAG = "sweeps.code_files"  # JSON {relative path: 8 hex of its content} of the user's code
CODE_DIRTY_TAG = "sweeps.code_dirty"  # true/false: the user's git work tree differs from mlflow.source.git.commit
CODELESS_HASH_TAG = "sweeps.config_hash_without_code"  # finds the run a job with edited code would have reused
PID_TAG, HOST_TAG = "sweeps.pid", "sweeps.host"  # who owns a RUNNING run
RESUMED_TAG = "job.resumed"
PREVIOUS_PARENT_TAG = "sweeps.previous_sweep"  # a resumed job's earlier parent run (it moved to the new sweep)
KIND_TAG = "sweeps.kind"  # "sweep" on a parent run
STOPPED_TAG = "sweeps.stopped"  # why a sweep stopped early (bad input, a signal)
COMMAND_TAG, SWEEP_DIR_TAG = "sweeps.command", "sweeps.sweep_dir"
SKIPPED_TAG_PREFIX = "sweeps.skipped."  # + config hash, on the parent run: a job skipped as done
# On the parent run too, each + config hash, for jobs a sweep reports without running them
# (sweeps.report.runs.sweep_runs): RUNNING_ELSEWHERE_TAG_PREFIX names the run another live process was
# running (its run id, or '' where that process had not opened it yet: the newest run of the hash is
# read then); REUSED_JOB_TAG_PREFIX holds JSON {"job": the job's index in the sweep, from 0, "params":
# {the sweep's own cost.* params where it gave cost.per_hour}}, so the report lists the job in the
# sweep's order and prices it at the sweep's price.
RUNNING_ELSEWHERE_TAG_PREFIX = "sweeps.running_elsewhere."
REUSED_JOB_TAG_PREFIX = "sweeps.reused_job."
CLAIM_FILE = "claim.lock"  # <checkpoint.dir>/<config hash>/claim.lock: flock-ed by the process running that config
OUTCOMES_TAG_PREFIX = "sweeps.outcomes."  # + outcome, on the parent run: how many jobs ended so
PARENT_RUN_TAG = "mlflow.parentRunId"
TELEMETRY_TAG = "job.telemetry"  # what was sampled, or why GPU telemetry is off
# with GPU telemetry: how energy was measured (counter, power_integration) and the clock-event reasons seen
ENERGY_METHOD_TAG, THROTTLE_REASONS_TAG = "job.energy_method", "job.throttle_reasons"
CHECKPOINTS_TAG = "sweeps.checkpoints"  # "off: <why>" when a full disk stopped checkpoints or the journal mid-job
LOADER_TAG = "job.loader"  # the loader a training job used and how its worker count was chosen
THREADS_TAG = "job.threads"  # torch's intra-op CPU threads the job ran with, and who chose them
HEAP_TAG = "job.malloc"  # how the job's C library kept freed heap (device.malloc_trim_mb)
OPTIMIZER_TAG = "job.optimizer"  # the optimizer class and the implementation it steps with (optimizer.impl)
PEAK_TAG = "job.peak"  # the datasheet peak MFU is measured against
LR_TAG = "job.lr_source"  # where the job's lr came from: "lr 0.025 = base_lr 0.1 × 32/128 (linear)" or "lr 0.05 (as written, no scaling)"
MAX_BATCH_BOUND_TAG = "job.max_batch_bound"
TARGET_TAG = "sweeps.target"  # with a target: "reached", or "missed" (all epochs ran without reaching it)
TARGET_REACHED, TARGET_MISSED = "reached", "missed"
TARGET_MODE_PARAM = "target.mode"  # max (reached when ≥ value) or min
TARGET_METRIC_PARAM = "target.metric"  # the run's param naming its target metric (absent/None: no target)
TARGET_VALUE_PARAM = "target.value"  # the run's param: the quality its target metric had to reach
LR_PARAMS = ("optimizer.lr", "optimizer.base_lr")  # the params a sweep varies the learning rate by
COST_PER_HOUR_PARAM, COST_CURRENCY_PARAM = "cost.per_hour", "cost.currency"  # a device's price (params)
VERDICT_TAG = "sweeps.verdict"  # on a sweep's parent run: the report's verdict, one paragraph per group
VERDICT_TAG_PREFIX = "sweeps.verdict."  # + a group's label (model:mlp dataset:mnist10k): its paragraph
TARGET_MODES = ("max", "min")  # target.mode: reached when the metric is ≥ (max) or ≤ (min) the value
COMPILED_TAG = "job.compiled"  # compile=true: "true", or "false (why)" — whether the model really ran compiled
ENV_TAG_PREFIX = "env."  # the machine: env.host, env.gpus, env.torch, ... (sweeps.provenance.machine)
ENV_HOST, ENV_CPU, ENV_CORES, ENV_PHYSICAL_CORES = "env.host", "env.cpu", "env.cores", "env.physical_cores"
ENV_RAM_GB, ENV_OS, ENV_GPUS, ENV_GPU_MEMORY_GB = "env.ram_gb", "env.os", "env.gpus", "env.gpu_memory_gb"
ENV_POWER_LIMIT_W, ENV_DRIVER, ENV_CUDA = "env.power_limit_w", "env.driver", "env.cuda"
ENV_CUDA_DRIVER, ENV_CUDNN, ENV_TORCH, ENV_TORCHVISION = "env.cuda_driver", "env.cudnn", "env.torch", "env.torchvision"
ENV_PYTHON, ENV_GIT_COMMIT = "env.python", "env.git_commit"

# ── how runs read in the MLflow UI (sweeps.tracking.writer.naming, .inputs) ────────────────────────
# MLflow's own tag names and value limits (mlflow.utils.mlflow_tags, mlflow.utils.validation), written out
# so a job's process never imports mlflow for them (its store calls run in sweeps.tracking.service.server);
# tests/test_names.py checks each against MLflow's.
MLFLOW_RUN_NOTE = "mlflow.note.content"  # a run's description (markdown)
MLFLOW_SOURCE_NAME, MLFLOW_SOURCE_TYPE = "mlflow.source.name", "mlflow.source.type"
MLFLOW_USER, MLFLOW_GIT_COMMIT = "mlflow.user", "mlflow.source.git.commit"
MLFLOW_DATASET_CONTEXT = "mlflow.data.context"  # an input's context tag: train or eval
MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH = 6000, 8000  # characters MLflow keeps of a param's / tag's value
SOURCE_NAME = "python -m sweeps"  # mlflow.source.name of every run (type LOCAL)
SWEEP_ID_CHARS = 6  # a sweep's short id: the first characters of its parent run id, "#3fa2c1" in names
TRAIN_EXAMPLES, TEST_EXAMPLES = "data.train_examples", "data.test_examples"  # params: examples actually used
INPUT_SHAPE = "data.input_shape"  # param: one example's shape, e.g. 3x32x32
CLASSES_PARAM = "data.classes"  # param of a classification job: how many classes its model tells apart
DATASET_CONTEXTS = ("train", "eval")  # mlflow.data.context of a job's two dataset inputs
# tags of a generated dataset's source (no files to point at): what made it, and its fingerprint
DATASET_GENERATOR_TAG, DATASET_FINGERPRINT_TAG = "sweeps.generator", "sweeps.fingerprint"
# Per-epoch copies of host/GPU telemetry under MLflow's system-metric names (mlflow/system_metrics/
# metrics/*.py; MB there is 1e6 bytes), so the run page's System metrics tab shows them.
SYSTEM_CPU_PCT = "system/cpu_utilization_percentage"  # machine-wide, all cores = 100
SYSTEM_MEM_MB = "system/system_memory_usage_megabytes"  # machine-wide memory in use


def system_gpu(index: int, what: str) -> str:
    """``system/gpu_<index>_<what>``: ``utilization_percentage``, ``memory_usage_megabytes``,
    ``power_usage_watts`` — MLflow's names for the job's GPU (index 0: the first it samples)."""
    return f"system/gpu_{index}_{what}"


SYSTEM_GPU_FIELDS = ("utilization_percentage", "memory_usage_megabytes", "power_usage_watts")
SYSTEM_METRICS = (SYSTEM_CPU_PCT, SYSTEM_MEM_MB, *(system_gpu(0, f) for f in SYSTEM_GPU_FIELDS))

# ── comparing runs: python -m sweeps.report --compare --by KEY ──────────────────────────────
# Short names for --by (any tag or param name works too); the default groups by machine.
COMPARE_BY = {"machine": HARDWARE_TAG, "host": ENV_HOST, "gpu": ENV_GPUS, "code": ENV_GIT_COMMIT,
              "torch": ENV_TORCH, "cuda": ENV_CUDA, "loader": "dataset.loader", "precision": "precision"}
COMPARE_DEFAULT_BY = "machine"
# Tags that name the machine: they differ together when machines are compared.
MACHINE_TAGS = (ENV_HOST, ENV_CPU, ENV_CORES, ENV_PHYSICAL_CORES, ENV_RAM_GB, ENV_OS, ENV_GPUS, ENV_GPU_MEMORY_GB,
                ENV_POWER_LIMIT_W, HARDWARE_TAG)
# Software and data a figure also depends on: compared runs that differ here beyond --by are flagged.
SOFTWARE_TAGS = (ENV_TORCH, ENV_TORCHVISION, ENV_CUDA, ENV_CUDNN, ENV_DRIVER, ENV_CUDA_DRIVER, ENV_PYTHON,
                 ENV_GIT_COMMIT, DATA_TAG)

# ── Slurm (hydra/launcher=slurm, sweeps.launchers.slurm): which Slurm job ran a run ─────────────
SLURM_JOB_TAG = "slurm.job_id"  # <array job id>_<index> for an array task: what squeue and scancel take
SLURM_ARRAY_INDEX_TAG = "slurm.array_index"  # the task's index in its array (array jobs only)
SLURM_NODE_TAG, SLURM_PARTITION_TAG = "slurm.node", "slurm.partition"
SLURM_RESTARTS_TAG = "slurm.restarts"  # times Slurm requeued the job so far (SLURM_RESTART_COUNT)
SLURM_TAGS = (SLURM_JOB_TAG, SLURM_ARRAY_INDEX_TAG, SLURM_NODE_TAG, SLURM_PARTITION_TAG, SLURM_RESTARTS_TAG)
SLURM_ERROR_TAG_PREFIX = "slurm.error."  # + Slurm job id, on the parent run: a job that raised, and why
# series, step = restart count: wall seconds from the checkpoint a requeued job resumed from to its restart
REQUEUE_LOST_S = "time/requeue_lost_s"

# ── metrics ─────────────────────────────────────────────────────────────────────────────────
# Per-epoch series: step = epoch number, from 1. Never also logged at step 0 as a summary.
EPOCH_S, EVAL_S, ELAPSED_S = "time/epoch_s", "time/eval_s", "time/elapsed_s"
TRAIN_LOSS, TRAIN_ACC, TRAIN_LR = "train/loss", "train/acc", "train/lr"
TEST_LOSS, TEST_ACC, TEST_RMSE = "test/loss", "test/acc", "test/rmse"
PHASE_SUM_S = "phase/sum_s"
# Not a metric (no "/"): a per-epoch record's wall clock (ms since the Unix epoch) when the journal took
# it, and the timestamp of each of its values in MLflow, however often they are sent (live, by the writer
# process, or replayed after a crash): MLflow's SQL store keys a value by (key, timestamp, step, value), so a
# value sent twice is stored once.
TIMESTAMP_MS = "timestamp_ms"
SAMPLES_PER_S = "perf/samples_per_s"  # per epoch: that epoch's examples ÷ its training pass
FLOPS_PER_S, MFU = "perf/flops_per_s", "perf/mfu"
EPOCH_PEAK_MB = "mem/epoch_peak_mb"
OTHER_CPU_PCT = "system/host/other_cpu_pct"  # other processes' share of all cores during the training pass


def phase_ms(phase: str) -> str:
    """``phase/<phase>_ms``: mean time per iteration of one phase (ms)."""
    return f"phase/{phase}_ms"


def phase_max_ms(phase: str) -> str:
    """``phase/<phase>_max_ms``: the slowest data-parallel rank's mean (ms)."""
    return f"phase/{phase}_max_ms"


EPOCH_METRICS = (EPOCH_S, EVAL_S, ELAPSED_S, TRAIN_LOSS, TRAIN_ACC, TRAIN_LR, TEST_LOSS, TEST_ACC, TEST_RMSE,
                 PHASE_SUM_S, *map(phase_ms, PHASES), SAMPLES_PER_S, FLOPS_PER_S, MFU, EPOCH_PEAK_MB, OTHER_CPU_PCT)
DDP_EPOCH_METRICS = tuple(map(phase_max_ms, PHASES))
# the telemetry sampler's, per training pass (sweeps.telemetry.stats). Machine figures sit under
# MLflow's system-metric prefix (SYSTEM_PREFIX): the run page's "System metrics" tab shows them, and
# its "Model metrics" tab keeps to the training (loss, accuracy, time, throughput).
SYSTEM_PREFIX = "system/"  # mlflow.system_metrics.system_metrics_monitor: the UI's filter for that tab
GPU_SM_CLOCK_MHZ, GPU_MEM_CLOCK_MHZ = "system/gpu/sm_clock_mhz", "system/gpu/mem_clock_mhz"
GPU_UTIL_PCT, GPU_MEM_USED_MAX_MB = "system/gpu/util_pct", "system/gpu/mem_used_max_mb"
GPU_TEMP_MAX_C, GPU_POWER_W, GPU_FAN_PCT = "system/gpu/temp_max_c", "system/gpu/power_w", "system/gpu/fan_pct"
GPU_THROTTLE_FRAC, GPU_ENERGY_J = "system/gpu/throttle_frac", "system/gpu/energy_j"
HOST_CPU_PCT, HOST_RSS_MAX_MB = "system/host/cpu_pct", "system/host/rss_max_mb"
HOST_SYS_MEM_USED_MAX_MB = "system/host/sys_mem_used_max_mb"
TELEMETRY_EPOCH_METRICS = (GPU_SM_CLOCK_MHZ, GPU_MEM_CLOCK_MHZ, GPU_UTIL_PCT, GPU_MEM_USED_MAX_MB, GPU_TEMP_MAX_C,
                           GPU_POWER_W, GPU_FAN_PCT, GPU_THROTTLE_FRAC, GPU_ENERGY_J, HOST_CPU_PCT, HOST_RSS_MAX_MB,
                           HOST_SYS_MEM_USED_MAX_MB)

# Summaries: one value per job (step 0).
FIRST_EPOCH_S, MEDIAN_EPOCH_S, TOTAL_S = "time/first_epoch_s", "time/median_epoch_s", "time/total_s"
COMPILE_S, WARMUP_S = "time/compile_s", "time/warmup_s"
JOB_S, OVERHEAD_S, OVERHEAD_FRAC = "time/job_s", "time/overhead_s", "time/overhead_frac"  # sweeps' own cost
EPOCH_P10_S, EPOCH_P90_S, EPOCH_MAD_S = "time/epoch_p10_s", "time/epoch_p90_s", "time/epoch_mad_s"  # epochs 2+
OTHER_CPU_MEAN_PCT = "system/host/other_cpu_mean_pct"  # mean of system/host/other_cpu_pct over epochs 2+
FINAL_ACC, FINAL_RMSE = "test/final_acc", "test/final_rmse"
PEAK_MB = "mem/peak_mb"
BATCH, LR = "batch", "lr"  # numeric copies of the knobs people sort by (params are text): the param batch, as a number
# the job's throughput (samples/s): training examples per epoch ÷ time/median_epoch_s (epochs 2 on; a
# 1-epoch job: its one epoch); the verdict's samples/s (sweeps.train.loop.summarize)
MEDIAN_SAMPLES_PER_S = "perf/median_samples_per_s"
PARAMS = "model/params"
WORLD_SIZE = "device.world_size"
FLOPS_PER_EXAMPLE, PEAK_FLOPS = "perf/flops_per_example", "perf/peak_flops"
SCALING_EFFICIENCY = "perf/scaling_efficiency"  # report only: throughput_N / (N × throughput_1)
MAX_BATCH, MAX_BATCH_PEAK_MB = "mem/max_batch", "mem/max_batch_peak_mb"
ENERGY_TOTAL_J, ENERGY_TRAIN_J, ENERGY_J_PER_SAMPLE = "energy/total_j", "energy/train_j", "energy/j_per_sample"
INFER_MEDIAN_MS, INFER_MEAN_MS, INFER_MIN_MS = "infer/median_ms", "infer/mean_ms", "infer/min_ms"
INFER_P10_MS, INFER_P90_MS, INFER_STD_MS, INFER_WALL_S = "infer/p10_ms", "infer/p90_ms", "infer/std_ms", "infer/wall_s"
INFER_ITER_MS = "infer/iter_ms"  # series: step = iteration
TRIAL_BATCH, TRIAL_FITS = "max_batch/batch", "max_batch/fits"  # series, step = trial: each batch size tried
TRIAL_PEAK_MB, TRIAL_PREDICTED = "max_batch/peak_mb", "max_batch/predicted"
MAX_BATCH_TRIAL_METRICS = (TRIAL_BATCH, TRIAL_FITS, TRIAL_PEAK_MB, TRIAL_PREDICTED)
MAX_BATCH_TRIALS = "max_batch/trials"
# Time to a target quality (target.metric reaching target.value; sweeps.time_to_target): training +
# evaluation time up to the evaluation that reached it, and the epochs, examples and steps it took
TO_TARGET_S = "time/to_target_s"
TARGET_EPOCHS, TARGET_SAMPLES, TARGET_STEPS = "target/epochs", "target/samples", "target/steps"

# Where a step's time goes (sweeps.train.profile_window, sweeps.bottleneck): a profiled window of
# steps after the timed epochs; each part's share of the step (%), at step 0
DIAG_PARTS = ("data", "host", "compute", "optimizer", "communication")


def diag_pct(part: str) -> str:
    """``diag/<part>_pct``: the share (%) of a profiled step spent in ``part`` (one of `DIAG_PARTS`)."""
    return f"diag/{part}_pct"


DIAG_STEP_MS, DIAG_WALL_STEP_MS = "diag/step_ms", "diag/wall_step_ms"  # profiled step: from the trace; host clock
DIAG_KERNELS_PER_STEP, DIAG_MEDIAN_KERNEL_US = "diag/kernels_per_step", "diag/median_kernel_us"  # GPU only
DIAG_DEVICE_IDLE_PCT = "diag/device_idle_pct"  # GPU only: share of the step no kernel runs
DIAG_METRICS = (*map(diag_pct, DIAG_PARTS), DIAG_STEP_MS, DIAG_WALL_STEP_MS, DIAG_KERNELS_PER_STEP,
                DIAG_MEDIAN_KERNEL_US, DIAG_DEVICE_IDLE_PCT)
# the named bottleneck (sweeps.bottleneck.CLASSES), the rule and figures behind it, the advised overrides ("; "-joined)
BOTTLENECK_TAG, DIAG_EVIDENCE_TAG, DIAG_ADVICE_TAG = "diag.bottleneck", "diag.evidence", "diag.advice"
DIAG_TRACE = "diag/trace.json"  # artifact: the profiled window's Chrome trace (Perfetto, chrome://tracing)
# python -m sweeps.advise (docs/reading-results.md, "Checking the advice"): on the diagnosed run, per advised key,
# the measured gain of its A/B sweep ("1.80× [1.50, 2.10] per epoch, 3 repeats each ...; A/B sweep <id>"); on the
# A/B sweep's parent and job runs, the diagnosed run they check (so a later check passes them over)
DIAG_CHECKED_TAG_PREFIX, DIAG_CHECKS_TAG = "diag.checked.", "diag.checks"


def diag_checked(key: str) -> str:
    """``diag.checked.<key>``: the tag holding the measured gain of the advice on ``key``."""
    return f"{DIAG_CHECKED_TAG_PREFIX}{key}"


SUMMARY_METRICS = (FIRST_EPOCH_S, MEDIAN_EPOCH_S, TOTAL_S, COMPILE_S, WARMUP_S, JOB_S, OVERHEAD_S, OVERHEAD_FRAC,
                   EPOCH_P10_S, EPOCH_P90_S, EPOCH_MAD_S, OTHER_CPU_MEAN_PCT, FINAL_ACC, FINAL_RMSE, PEAK_MB,
                   BATCH, LR, PARAMS, WORLD_SIZE, FLOPS_PER_EXAMPLE, PEAK_FLOPS, MAX_BATCH,
                   MAX_BATCH_PEAK_MB, MAX_BATCH_TRIALS, ENERGY_TOTAL_J, ENERGY_TRAIN_J, ENERGY_J_PER_SAMPLE,
                   INFER_MEDIAN_MS, INFER_MEAN_MS, INFER_MIN_MS, INFER_P10_MS, INFER_P90_MS, INFER_STD_MS,
                   INFER_WALL_S, SAMPLES_PER_S,  # perf/samples_per_s: a summary of inference jobs only
                   MEDIAN_SAMPLES_PER_S,
                   TO_TARGET_S, TARGET_EPOCHS, TARGET_SAMPLES, TARGET_STEPS)
SERIES_METRICS = (INFER_ITER_MS, *MAX_BATCH_TRIAL_METRICS, REQUEUE_LOST_S)
REPORT_METRICS = (SCALING_EFFICIENCY,)  # computed by the report, not logged by a job

ALL_METRICS = frozenset((*EPOCH_METRICS, *DDP_EPOCH_METRICS, *TELEMETRY_EPOCH_METRICS, *SUMMARY_METRICS,
                         *SERIES_METRICS, *REPORT_METRICS, *SYSTEM_METRICS, *DIAG_METRICS))

# Names metrics had before (the report reads runs logged under either: sweeps.report.runs): the
# machine figures before they moved under SYSTEM_PREFIX ("host/cpu_pct" is now "system/host/cpu_pct").
# The batch size's metric was "batch_size" before it took the param's name.
FORMER_NAMES = {**{name: name.removeprefix(SYSTEM_PREFIX)
                   for name in (*TELEMETRY_EPOCH_METRICS, OTHER_CPU_PCT, OTHER_CPU_MEAN_PCT)},
                BATCH: "batch_size"}
# The tags a job's conditions had before they took the job.* prefix of the tag scheme (docs/reading-results.md,
# "Tags"): the report reads runs tagged under either.
FORMER_TAGS = {RESUMED_TAG: "resumed", TELEMETRY_TAG: "telemetry", COMPILED_TAG: "compiled", LOADER_TAG: "data.loader",
               THREADS_TAG: "torch.threads", HEAP_TAG: "host.malloc", OPTIMIZER_TAG: "torch.optimizer",
               PEAK_TAG: "perf.peak", LR_TAG: "lr.source", MAX_BATCH_BOUND_TAG: "max_batch.bound",
               ENERGY_METHOD_TAG: "telemetry.energy_method", THROTTLE_REASONS_TAG: "telemetry.throttle_reasons"}


# ── bundles: python -m sweeps.bundle export / import (sweeps.bundle) ────────────────────────
# Tags an imported run carries (the source run's own tags are copied as they were): where it came from,
# its identity (the source run's id: a run is imported once, however often its bundles are), and the
# digest of the bundle content it was completed from (set last: an interrupted import lacks it).
IMPORTED_FROM_TAG = "sweeps.imported_from"  # "<source host>: <source store URI>, run <source run id>"
IMPORT_SOURCE_RUN_TAG = "sweeps.import.source_run"  # the source run's MLflow run id
IMPORT_DIGEST_TAG = "sweeps.import.digest"  # sha256 (hex) of the run's members in the bundle it completed from
