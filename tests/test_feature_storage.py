"""Feature-cache storage: int8 rows with a float16 scale each, against the float16 they replace."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from train.feature_storage import SCALE, bytes_per_value, dequantize_rows, quantize_rows, read, stored

REPO = Path(__file__).resolve().parents[1]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 6), groups=st.integers(1, 3), hidden=st.integers(1, 40), seed=st.integers(0, 10**6),
       scale=st.floats(1e-3, 1e3))
def test_every_value_comes_back_within_half_a_step_of_its_row(rows, groups, hidden, seed, scale):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, groups * hidden, generator=g) * scale
    x[0, :hidden] = 0  # an all-zero row stays zero
    q, s = quantize_rows(x, groups)
    assert q.dtype == torch.int8 and s.dtype == torch.float16 and s.shape == (rows, groups)
    back = dequantize_rows(q, s)
    step = s.float().repeat_interleave(hidden, dim=-1)
    assert ((back - x).abs() <= step / 2 + 1e-6 * scale).all()
    assert torch.equal(back[0, :hidden], torch.zeros(hidden))
    used = q.reshape(rows, groups, hidden).abs().amax(-1).int()  # each nonzero row spans the int8 range
    assert ((used >= 126) | (s.float() < torch.finfo(torch.float16).tiny)).all()  # subnormal scales are coarse


def test_a_batch_reads_the_same_whatever_its_storage():
    x = torch.randn(2, 5, 12)
    half, small = stored(x, "f", "float16"), stored(x, "f", "int8", groups=3)
    assert set(half) == {"f"} and set(small) == {"f", "f" + SCALE}
    assert torch.allclose(read(half, "f"), x, atol=1e-2) and torch.allclose(read(small, "f"), x, atol=0.05)
    assert read({}, "f") is None
    assert bytes_per_value("int8", 1536) < 0.51 * bytes_per_value("float16", 1536)
    with pytest.raises(ValueError, match="float16, int8"):
        bytes_per_value("fp8", 16)


@pytest.mark.integration  # two cache builds and a training run
def test_an_int8_cache_trains_and_converting_a_float16_one_gives_the_same_shards(tmp_path, tiny_target_dir,
                                                                                 text_file):
    import datasets
    from test_train import tiny_cfg

    from data.teacher_cache_files import DONE
    from train.distill import train

    common = ["model/draft=eagle3", "teacher=cache", "spec_eval.enabled=false", "trainer.max_steps=2",
              "model.draft.unroll_steps=2", f"paths.cache_dir={tmp_path / 'cache'}"]
    half = train(tiny_cfg(tmp_path / "half", tiny_target_dir, text_file, *common))
    small = train(tiny_cfg(tmp_path / "int8", tiny_target_dir, text_file, *common, "feature_cache_storage=int8"))
    assert half["steps"] == small["steps"] == 2
    built = {p.parent.name: p.parent for p in (tmp_path / "cache" / "teacher").glob(f"*/*-features-aux-*/{DONE}")}
    f16 = next(p for n, p in built.items() if not n.endswith("-int8"))
    i8 = built[f16.name + "-int8"]
    assert json.loads((i8 / DONE).read_text())["storage"] == "int8"
    spec = importlib.util.spec_from_file_location("convert", REPO / "scripts" / "convert_feature_cache.py")
    convert = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(convert)
    derived = convert.convert(f16, tmp_path / "derived")
    for split in ("train", "val"):
        a = datasets.concatenate_datasets([datasets.load_from_disk(str(s)) for s in sorted((i8 / split).iterdir())])
        b = datasets.concatenate_datasets([datasets.load_from_disk(str(s))
                                           for s in sorted((derived / split).iterdir())])
        a, b = a.with_format("torch"), b.with_format("torch")
        assert set(a.column_names) == set(b.column_names) and len(a) == len(b)
        a, b = a[:], b[:]
        for key in a:  # float16 features rounded once more: at most one step apart
            diff = (a[key].float() - b[key].float()).abs().max()
            assert diff <= (1 if a[key].dtype == torch.int8 else 1e-2 * a[key].float().abs().max()), key
    with pytest.raises(SystemExit, match="float16 feature cache"):
        convert.convert(i8, tmp_path / "again")
