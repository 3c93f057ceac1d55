"""sweeps.data.datasets on the real on-disk formats: CIFAR-10 python batches, MNIST idx files, ImageFolder
PNGs, scikit-learn's diabetes, synthetic tensors; and the loaders built on them.

No network here: the CIFAR-10 and MNIST files are written in their published formats under
tmp_path (and the real MNIST test split the repo holds, examples/data), and torchvision's own
readers load them.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from hydra import compose, initialize_config_dir
from PIL import Image

import sweeps.config
from sweeps.data import loaders
from sweeps.data.loaders import default_workers, describe_workers, make_loaders
from sweeps.data.builtin import CIFAR10_STATS, MNIST_STATS
from sweeps.data.datasets import DataSpec, build_datasets

from sweeps.errors import DataUnavailable, UsageError
from sweeps.data import mnist_folder as mnist_folder_module

REPO = Path(__file__).resolve().parents[1]
MNIST_RAW = REPO / "examples" / "data" / "mnist-t10k" / "raw"  # the published MNIST test split
SHARED_DATA = Path(os.environ.get("SWEEPS_SHARED_DATA", REPO.parent / "shared" / "data"))  # where present


def dataset_cfg(*overrides: str):
    """The ``dataset`` node of the project's real config composed with ``overrides``."""
    sweeps.config.register()
    with initialize_config_dir(config_dir=str(sweeps.config.CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides)).dataset


def unnormalize(x: torch.Tensor, stats) -> np.ndarray:
    """Normalized (C, H, W) float image → the uint8 pixels it was made from."""
    mean, std = (torch.tensor(s).view(-1, 1, 1) for s in stats)
    return (x * std + mean).mul(255).round().clamp(0, 255).to(torch.uint8).numpy()


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert msg and "\n" not in msg, f"message is not one line: {msg!r}"
    return msg


# --------------------------------------------------------------------------- CIFAR-10

class _Py2Pickler(pickle._Pickler):
    """Writes ``bytes`` as Python 2 ``str`` (opcodes U/T), as the published CIFAR-10 batches were
    pickled; torchvision reads them with ``encoding="latin1"`` and gets ``str`` keys."""

    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2_str(self, obj: bytes) -> None:
        n = len(obj)
        head = pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)
        self.write(head + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str


def _py2_pickle(obj, path: Path) -> str:
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    path.write_bytes(buf.getvalue())
    return hashlib.md5(buf.getvalue()).hexdigest()


CIFAR_NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
PER_BATCH, N_TEST = 4, 6


@pytest.fixture
def cifar_root(tmp_path, monkeypatch):
    """A tiny ``cifar-10-batches-py/`` (5 × 4 training images, 6 test images) in the published
    format; returns (root, train rows, train labels, test rows, test labels)."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    train_list, train_rows, train_labels = [], [], []
    for b in range(1, 6):
        rows = rng.integers(0, 256, (PER_BATCH, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, PER_BATCH)]
        md5 = _py2_pickle({b"batch_label": f"training batch {b} of 5".encode(), b"labels": labels,
                           b"data": rows, b"filenames": [f"img_{b}_{i}.png".encode() for i in range(PER_BATCH)]},
                          folder / f"data_batch_{b}")
        train_list.append([f"data_batch_{b}", md5])
        train_rows.append(rows)
        train_labels += labels
    test_rows = rng.integers(0, 256, (N_TEST, 3072), dtype=np.uint8)
    test_labels = [int(v) for v in rng.integers(0, 10, N_TEST)]
    test_md5 = _py2_pickle({b"batch_label": b"testing batch 1 of 1", b"labels": test_labels, b"data": test_rows,
                            b"filenames": [f"t_{i}.png".encode() for i in range(N_TEST)]}, folder / "test_batch")
    meta_md5 = _py2_pickle({b"num_cases_per_batch": PER_BATCH, b"label_names": CIFAR_NAMES, b"num_vis": 3072},
                           folder / "batches.meta")
    # torchvision checks the published md5 sums; point them at the files written here
    cls = torchvision.datasets.CIFAR10
    monkeypatch.setattr(cls, "train_list", train_list)
    monkeypatch.setattr(cls, "test_list", [["test_batch", test_md5]])
    monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": meta_md5})
    return tmp_path, np.concatenate(train_rows), train_labels, test_rows, test_labels


def _cifar_cfg(root, *overrides):
    return dataset_cfg("dataset=cifar10", f"dataset.root='{root}'", "dataset.download=false",
                       "dataset.augment=false", *overrides)


def test_cifar10_reads_published_format(cifar_root):
    """CIFAR-10 batches load with the right sizes, shape, DataSpec, labels and class names."""
    root, _, train_labels, _, test_labels = cifar_root
    train, test, spec = build_datasets(_cifar_cfg(root), seed=0)
    assert spec == DataSpec((3, 32, 32), 10)
    assert (len(train), len(test)) == (5 * PER_BATCH, N_TEST)
    assert train.targets == train_labels and test.targets == test_labels
    assert train.classes == [n.decode() for n in CIFAR_NAMES]
    x, y = train[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and y == train_labels[0]


def test_cifar10_pixels_round_trip(cifar_root):
    """Without augmentation, every normalized image inverts to the uint8 row on disk (R, G, B
    planes of 32×32, row-major): no channel swap, transpose or off-by-one normalization."""
    root, train_rows, train_labels, test_rows, test_labels = cifar_root
    train, test, _ = build_datasets(_cifar_cfg(root), seed=0)
    for ds, rows, labels in [(train, train_rows, train_labels), (test, test_rows, test_labels)]:
        for i in (0, len(ds) - 1):
            x, y = ds[i]
            np.testing.assert_array_equal(unnormalize(x, CIFAR10_STATS), rows[i].reshape(3, 32, 32))
            assert y == labels[i]


def test_cifar10_augment_keeps_shape_and_leaves_test_alone(cifar_root):
    """augment=true crops/flips training images (still 3×32×32) but never the test images."""
    root, _, _, test_rows, _ = cifar_root
    train, test, _ = build_datasets(_cifar_cfg(root, "dataset.augment=true"), seed=0)
    assert train[0][0].shape == (3, 32, 32)
    np.testing.assert_array_equal(unnormalize(test[0][0], CIFAR10_STATS), test_rows[0].reshape(3, 32, 32))


def test_cifar10_subsets_are_seeded(cifar_root):
    """train_size/test_size pick the same examples for the same seed and others for another."""
    root, train_rows, train_labels, _, _ = cifar_root
    cfg = _cifar_cfg(root, "dataset.train_size=7", "dataset.test_size=3")
    a_train, a_test, _ = build_datasets(cfg, seed=0)
    b_train, b_test, _ = build_datasets(cfg, seed=0)
    assert (len(a_train), len(a_test)) == (7, 3)
    assert list(a_train.indices) == list(b_train.indices) and list(a_test.indices) == list(b_test.indices)
    others = {tuple(build_datasets(cfg, seed=s)[0].indices) for s in range(1, 6)}
    assert others - {tuple(a_train.indices)}, "a different seed never changes the subset"
    # the subset's examples are the real ones at those indices
    j = a_train.indices[0]
    x, y = a_train[0]
    assert y == train_labels[j]
    np.testing.assert_array_equal(unnormalize(x, CIFAR10_STATS), train_rows[j].reshape(3, 32, 32))


@pytest.mark.parametrize("key,n", [("train_size", 5 * PER_BATCH + 1), ("test_size", N_TEST + 1)])
def test_subset_larger_than_data_is_a_usage_error(cifar_root, key, n):
    """Asking for more examples than exist fails with one line naming the key, not an IndexError."""
    with pytest.raises(UsageError) as e:
        build_datasets(_cifar_cfg(cifar_root[0], f"dataset.{key}={n}"), seed=0)
    assert f"dataset.{key}" in one_line(e)


@pytest.mark.parametrize("name,how", [("cifar10", "cifar-10-batches-py"), ("mnist", "MNIST/raw")])
def test_missing_files_without_download(tmp_path, name, how):
    """No files and download=false: one line naming dataset.root and saying how to provide them."""
    cfg = dataset_cfg(f"dataset={name}", f"dataset.root='{tmp_path / 'nothing'}'", "dataset.download=false")
    with pytest.raises(DataUnavailable) as e:
        build_datasets(cfg, seed=0)
    msg = one_line(e)
    assert "dataset.root" in msg and how in msg and "dataset.download=false" in msg


@pytest.mark.parametrize("name", ["cifar10", "mnist"])
def test_failed_download_is_data_unavailable(tmp_path, name):
    """download=true with no network (DNS fails here) ends in DataUnavailable, not a urllib trace."""
    cfg = dataset_cfg(f"dataset={name}", f"dataset.root='{tmp_path}'", "dataset.download=true")
    with pytest.raises(DataUnavailable) as e:
        build_datasets(cfg, seed=0)
    msg = one_line(e)
    assert "dataset.root" in msg and "download failed" in msg


# --------------------------------------------------------------------------- MNIST

def _idx_images(a: np.ndarray) -> bytes:
    return struct.pack(">iiii", 2051, *a.shape) + a.astype(np.uint8).tobytes()


def _idx_labels(a: np.ndarray) -> bytes:
    return struct.pack(">ii", 2049, len(a)) + a.astype(np.uint8).tobytes()


def test_mnist_hand_written_idx_files(tmp_path):
    """Tiny idx files (magic 2051/2049, big-endian dims) load with their pixels and labels."""
    rng = np.random.default_rng(1)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    data = {}
    for split, n in [("train", 5), ("t10k", 3)]:
        images, labels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(_idx_images(images))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(_idx_labels(labels))
        data[split] = images, labels
    train, test, spec = build_datasets(dataset_cfg("dataset=mnist", f"dataset.root='{tmp_path}'",
                                                   "dataset.download=false"), seed=0)
    assert spec == DataSpec((1, 28, 28), 10)
    for ds, (images, labels) in [(train, data["train"]), (test, data["t10k"])]:
        assert len(ds) == len(labels)
        for i in range(len(ds)):
            x, y = ds[i]
            assert x.shape == (1, 28, 28) and y == labels[i]
            np.testing.assert_array_equal(unnormalize(x, MNIST_STATS)[0], images[i])


@pytest.fixture(scope="module")
def real_mnist_raw():
    return {kind: gzip.decompress((MNIST_RAW / f"t10k-{kind}-ubyte.gz").read_bytes()) for kind in ("images-idx3", "labels-idx1")}


def test_mnist_real_test_split(tmp_path, real_mnist_raw):
    """The published t10k idx files (under both split names) load as 10,000 1×28×28 images whose
    labels have the file's class distribution and whose pixels are the file's bytes."""
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split in ("train", "t10k"):
        for kind, blob in real_mnist_raw.items():
            (raw / f"{split}-{kind}-ubyte").write_bytes(blob)
    train, test, spec = build_datasets(dataset_cfg("dataset=mnist", f"dataset.root='{tmp_path}'",
                                                   "dataset.download=false"), seed=0)
    assert spec == DataSpec((1, 28, 28), 10)
    assert len(train) == len(test) == 10_000
    labels = np.frombuffer(real_mnist_raw["labels-idx1"], np.uint8, offset=8)
    pixels = np.frombuffer(real_mnist_raw["images-idx3"], np.uint8, offset=16).reshape(-1, 28, 28)
    expected = np.bincount(labels, minlength=10)
    assert expected.sum() == 10_000 and (expected > 800).all()  # all ten digits present
    np.testing.assert_array_equal(np.bincount(train.targets.numpy(), minlength=10), expected)
    np.testing.assert_array_equal(np.bincount(test.targets.numpy(), minlength=10), expected)
    for i in (0, 9_999):
        x, y = test[i]
        assert x.shape == (1, 28, 28) and y == labels[i]
        np.testing.assert_array_equal(unnormalize(x, MNIST_STATS)[0], pixels[i])


# --------------------------------------------------------------------------- ImageFolder

def _write_folder(root: Path, mode: str, size=(8, 8), classes=("cat", "dog"), per_class=(3, 2)) -> None:
    rng = np.random.default_rng(2)
    for split, n in zip(("train", "val"), per_class):
        for c in classes:
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                shape = (size[1], size[0]) + ((3,) if mode == "RGB" else ())
                Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(root / split / c / f"{i}.png")


def _folder_cfg(root, *overrides):
    return dataset_cfg("dataset=imagefolder", f"dataset.root='{root}'", *overrides)


def test_imagefolder_grayscale(tmp_path):
    """Grayscale PNGs → 1 channel detected, DataSpec from the images, one output per class,
    labels from the folder names, training images normalized to mean 0 / std 1."""
    _write_folder(tmp_path, "L")
    train, test, spec = build_datasets(_folder_cfg(tmp_path), seed=0)
    assert spec == DataSpec((1, 8, 8), 2)
    assert (len(train), len(test)) == (6, 4)
    assert train.classes == test.classes == ["cat", "dog"]
    xs = torch.stack([train[i][0] for i in range(len(train))])
    assert xs.shape == (6, 1, 8, 8)
    assert [train[i][1] for i in range(len(train))] == [0, 0, 0, 1, 1, 1]
    assert abs(xs.mean().item()) < 1e-4 and abs(xs.std().item() - 1) < 1e-3


def test_imagefolder_rgb_keeps_colour(tmp_path):
    """RGB PNGs → 3 channels, and the channels are the image's own R, G and B (not gray copies)."""
    _write_folder(tmp_path, "RGB")
    train, test, spec = build_datasets(_folder_cfg(tmp_path), seed=0)
    assert spec == DataSpec((3, 8, 8), 2)
    x = train[0][0]
    assert x.shape == (3, 8, 8) and test[0][0].shape == (3, 8, 8)
    assert not torch.allclose(x[0], x[1]) and not torch.allclose(x[1], x[2])


def test_imagefolder_channels_override(tmp_path):
    """dataset.channels=1 turns RGB images into one gray channel."""
    _write_folder(tmp_path, "RGB")
    train, _, spec = build_datasets(_folder_cfg(tmp_path, "dataset.channels=1"), seed=0)
    assert spec.in_shape == (1, 8, 8) and train[0][0].shape == (1, 8, 8)


def test_imagefolder_image_size_resizes(tmp_path):
    """dataset.image_size=N resizes every image, train and val, and the DataSpec says so."""
    _write_folder(tmp_path, "L", size=(8, 8))
    train, test, spec = build_datasets(_folder_cfg(tmp_path, "dataset.image_size=12"), seed=0)
    assert spec.in_shape == (1, 12, 12)
    assert train[0][0].shape == test[0][0].shape == (1, 12, 12)


def test_imagefolder_missing_split(tmp_path):
    """No train/ and val/ under the root: one line naming dataset.root and the expected layout."""
    (tmp_path / "train" / "a").mkdir(parents=True)
    with pytest.raises(DataUnavailable) as e:
        build_datasets(_folder_cfg(tmp_path), seed=0)
    msg = one_line(e)
    assert "dataset.root" in msg and "train/" in msg and "val/" in msg


def test_imagefolder_empty_train(tmp_path):
    """train/ without class folders is DataUnavailable (one line), not torchvision's traceback."""
    _write_folder(tmp_path, "L")
    for p in sorted((tmp_path / "train").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    with pytest.raises(DataUnavailable) as e:
        build_datasets(_folder_cfg(tmp_path), seed=0)
    assert "dataset.root" in one_line(e)


def test_imagefolder_val_classes_must_match_train(tmp_path):
    """val/ with other classes than train/ would mislabel every example: DataUnavailable."""
    _write_folder(tmp_path, "L")
    (tmp_path / "val" / "dog").rename(tmp_path / "val" / "bird")
    with pytest.raises(DataUnavailable) as e:
        build_datasets(_folder_cfg(tmp_path), seed=0)
    msg = one_line(e)
    assert "dataset.root" in msg and "bird" in msg


def test_mnist10k_reads_the_repos_digits_as_an_image_folder(mnist_folder):
    """dataset=mnist10k: the repo's 10k MNIST digits as an ImageFolder, 8,000 train / 2,000 val,
    10 classes, 1×28×28, each PNG the idx file's image."""
    train, test, spec = build_datasets(dataset_cfg("dataset=mnist10k", f"dataset.folder='{mnist_folder}'"), seed=0)
    assert spec == DataSpec((1, 28, 28), 10)
    assert (len(train), len(test)) == (8_000, 2_000)
    assert train.classes == [str(d) for d in range(10)]
    images, labels = mnist_folder_module.read_idx(MNIST_RAW)
    path, y = test.samples[0]
    index = int(Path(path).stem)
    assert y == labels[index]
    np.testing.assert_array_equal(np.array(Image.open(path)), images[index])
    x, _ = test[0]
    assert x.shape == (1, 28, 28)


def test_mnist10k_without_its_idx_files_is_unavailable_in_one_line(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"not mnist"))
    (tmp_path / "raw" / "t10k-labels-idx1-ubyte.gz").write_bytes((MNIST_RAW / "t10k-labels-idx1-ubyte.gz").read_bytes())
    with pytest.raises(DataUnavailable) as e:
        build_datasets(dataset_cfg("dataset=mnist10k", f"dataset.root='{tmp_path}'"), seed=0)
    assert "t10k-images-idx3-ubyte.gz" in one_line(e) and "md5" in one_line(e)
    (tmp_path / "raw" / "t10k-images-idx3-ubyte.gz").unlink()
    with pytest.raises(DataUnavailable) as e:
        build_datasets(dataset_cfg("dataset=mnist10k", f"dataset.root='{tmp_path}'"), seed=0)
    assert "no t10k-images-idx3-ubyte.gz" in one_line(e)
    assert not (tmp_path / "imagefolder").exists()


@pytest.mark.slow  # writes the 10,000 PNGs (~10 s of CPU)
def test_the_written_mnist_folder_is_the_published_split(tmp_path):
    """mnist_folder.ensure writes the layout ../shared/data/mnist-10k-imagefolder has (the same
    files and pixels, where that copy is present) and leaves a written folder as it is."""
    out = mnist_folder_module.ensure(MNIST_RAW, tmp_path / "mnist")
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.png"))
    assert len(files) == 10_000 and sum(f.startswith("train/") for f in files) == 8_000
    assert [p.name for p in tmp_path.iterdir()] == ["mnist"]  # no working folder left beside it
    images, labels = mnist_folder_module.read_idx(MNIST_RAW)
    for f in files[::997]:
        split, digit, name = f.split("/")
        assert int(digit) == labels[int(name[:-4])]
        np.testing.assert_array_equal(np.array(Image.open(out / f)), images[int(name[:-4])])
    shared = SHARED_DATA / "mnist-10k-imagefolder"
    if shared.is_dir():
        assert files == sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*.png"))
    stamp = (out / files[0]).stat().st_mtime_ns
    assert mnist_folder_module.ensure(MNIST_RAW, out) == out and (out / files[0]).stat().st_mtime_ns == stamp


# --------------------------------------------------------------------------- diabetes

def test_diabetes_split_and_standardisation():
    """442 rows split by test_fraction; features and target standardised with TRAIN statistics
    only (test rows are not centred exactly), and target_scale is the train target's std in the
    target's own units, so RMSE × target_scale is in disease-progression units."""
    from sklearn.datasets import load_diabetes

    train, test, spec = build_datasets(dataset_cfg("dataset=diabetes"), seed=0)
    assert (len(train), len(test)) == (442 - 88, 88)
    assert spec.in_shape == (10,) and spec.num_outputs == 1 and spec.problem == "regression"
    (xtr, ytr), (xte, yte) = train.tensors, test.tensors
    assert ytr.shape == (354, 1) and yte.shape == (88, 1)
    assert torch.allclose(xtr.mean(0), torch.zeros(10), atol=1e-5)
    assert torch.allclose(xtr.std(0), torch.ones(10), atol=1e-4)
    assert abs(ytr.mean().item()) < 1e-5 and abs(ytr.std().item() - 1) < 1e-4
    assert xte.mean(0).abs().max() > 1e-3  # test rows were not used for the statistics
    # de-standardising with target_scale gives back the raw targets: sorted values line up on
    # a line of slope target_scale
    raw = np.sort(load_diabetes(return_X_y=True)[1])
    std = np.sort(torch.cat([ytr, yte]).squeeze(1).double().numpy())
    slope, intercept = np.polyfit(std, raw, 1)
    assert spec.target_scale == pytest.approx(slope, rel=1e-4)
    np.testing.assert_allclose(std * spec.target_scale + intercept, raw, atol=1e-2)
    assert spec.target_scale != pytest.approx(raw.std(ddof=1), rel=1e-4)  # train rows only


def test_diabetes_split_is_seeded():
    """Same seed → same split; another seed → another split; test_fraction sets the size."""
    a = build_datasets(dataset_cfg("dataset=diabetes"), seed=3)
    b = build_datasets(dataset_cfg("dataset=diabetes"), seed=3)
    c = build_datasets(dataset_cfg("dataset=diabetes"), seed=4)
    assert torch.equal(a[1].tensors[0], b[1].tensors[0]) and a[2] == b[2]
    assert not torch.equal(a[1].tensors[1], c[1].tensors[1])
    half = build_datasets(dataset_cfg("dataset=diabetes", "dataset.test_fraction=0.5"), seed=3)
    assert (len(half[0]), len(half[1])) == (221, 221)


# --------------------------------------------------------------------------- synthetic

def test_synthetic_sizes_shape_and_seed():
    """Synthetic data takes its sizes, shape and classes from config and is fixed by the seed."""
    cfg = dataset_cfg("dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=50",
                      "dataset.test_size=20", "dataset.num_classes=3")
    train, test, spec = build_datasets(cfg, seed=0)
    assert spec == DataSpec((1, 8, 8), 3)
    assert (len(train), len(test)) == (50, 20)
    assert train.tensors[0].shape == (50, 1, 8, 8) and train.tensors[1].shape == (50,)
    assert set(train.tensors[1].tolist()) == {0, 1, 2}
    again, other = build_datasets(cfg, seed=0), build_datasets(cfg, seed=1)
    assert torch.equal(again[0].tensors[0], train.tensors[0]) and torch.equal(again[1].tensors[1], test.tensors[1])
    assert not torch.equal(other[0].tensors[0], train.tensors[0])


def test_synthetic_defaults_from_yaml():
    """dataset=synthetic alone gives the YAML's 10,000 / 2,000 examples of 3×32×32, 10 classes."""
    train, test, spec = build_datasets(dataset_cfg("dataset=synthetic"), seed=0)
    assert (len(train), len(test)) == (10_000, 2_000) and spec == DataSpec((3, 32, 32), 10)


# --------------------------------------------------------------------------- loaders

def _indexed(n: int) -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(n), torch.arange(n) % 3)


def _order(loader) -> list[int]:
    return [i for x, _ in loader for i in x.tolist()]


def test_train_loader_shuffles_deterministically():
    """Same seed → same order, epoch after epoch; each epoch sees every example exactly once and
    the next epoch is reshuffled; another seed gives another order."""
    cpu = torch.device("cpu")
    a, _ = make_loaders(_indexed(50), _indexed(10), 8, cpu, 0, seed=0)
    b, _ = make_loaders(_indexed(50), _indexed(10), 8, cpu, 0, seed=0)
    c, _ = make_loaders(_indexed(50), _indexed(10), 8, cpu, 0, seed=1)
    assert torch.equal(next(iter(a))[0], next(iter(b))[0])
    a1, a2 = _order(a), _order(a)
    b1, b2 = _order(b), _order(b)
    assert (a1, a2) == (b1, b2)
    assert sorted(a1) == sorted(a2) == list(range(50))
    assert a1 != a2 and a1 != list(range(50))
    assert _order(c) != a1 and len(next(iter(a))[0]) == 8


def test_test_loader_is_ordered_and_capped():
    """The test loader keeps dataset order; a batch larger than the test set becomes one batch."""
    cpu = torch.device("cpu")
    _, test = make_loaders(_indexed(50), _indexed(20), 8, cpu, 0, seed=0)
    assert _order(test) == list(range(20))
    _, big = make_loaders(_indexed(50), _indexed(20), 128, cpu, 0, seed=0)
    batches = list(big)
    assert big.batch_size == 20 and len(batches) == 1 and batches[0][0].tolist() == list(range(20))


def test_default_workers(monkeypatch):
    """In-memory data gets no workers; image datasets get the cores the training leaves free (a
    CPU job: beyond torch's threads; a GPU job: all but one); dataset.num_workers wins; the tag
    says which."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for name in ("diabetes", "synthetic"):
        cfg = dataset_cfg(f"dataset={name}")
        train = build_datasets(cfg, seed=0)[0]  # tensors in memory
        assert default_workers(cfg, cpu, train) == default_workers(cfg, cuda, train) == 0
    cifar = dataset_cfg("dataset=cifar10")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(loaders, "_PROCESS_THREADS", 6)  # torch's default count for the process
    assert default_workers(cifar, cpu) == 2 and default_workers(cifar, cuda) == 7
    monkeypatch.setattr(loaders, "_PROCESS_THREADS", 8)
    assert default_workers(cifar, cpu) == 0  # torch uses every core: no worker fights it
    assert "0 worker(s) (chosen: 8 core(s), torch's default 8 thread(s), cpu training)" in describe_workers(
        dataset_cfg("dataset=cifar10", "dataset.loader=dataloader"), cpu)
    assert default_workers(dataset_cfg("dataset=cifar10", "dataset.num_workers=0"), cuda) == 0
    assert default_workers(dataset_cfg("dataset=synthetic", "dataset.num_workers=3"), cpu) == 3
