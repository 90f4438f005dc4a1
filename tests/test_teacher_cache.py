"""Teacher-logit cache: sparse KL laws, a resumable cache job, and training from the cache without the target."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hypothesis import given, settings, strategies as st

from conftest import CONF, REPO
from test_train import tiny_cfg
from train import sparse_kl, teacher_cache
from train.distill import train
from train.losses import expected_accept, forward_kl


def _cached(t_logits, k):
    log_p = F.log_softmax(t_logits, -1)
    top = log_p.topk(k, -1)
    return top.indices.int(), top.values.half(), (1 - top.values.exp().sum(-1)).clamp_min(0).log()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(3, 40), st.integers(1, 40), st.integers(0, 10_000))
def test_sparse_kl_is_a_lower_bound_of_the_full_kl_and_exact_when_nothing_is_dropped(n, v, k, seed):
    g = torch.Generator().manual_seed(seed)
    s, t = torch.randn(n, v, generator=g) * 3, torch.randn(n, v, generator=g) * 3
    k = min(k, v)
    ids, logp, tail = _cached(t, k)
    sparse = sparse_kl.sparse_forward_kl(s, ids, logp, tail)
    full = forward_kl(s, t)
    slack = 1e-2 + 2e-3 * full  # log-probs are stored in float16
    assert torch.all(sparse >= -slack) and torch.all(sparse <= full + slack)  # merging outcomes never raises KL
    accept = sparse_kl.sparse_metrics(s, ids, logp, tail)
    assert torch.all(accept["expected_accept"] >= expected_accept(s, t) - 1e-2)  # an upper bound
    assert torch.equal(accept["top1_agree"], (s.argmax(-1) == t.argmax(-1)).float())
    if k == v:
        assert torch.allclose(sparse, full, atol=1e-2, rtol=2e-3)


def _sparse_kl_by_autograd(s, ids, logp, tail):
    """The k + 1 outcome KL written plainly, for autograd to differentiate."""
    log_q = F.log_softmax(s, -1)
    ids = ids.long()
    log_q_top = log_q.gather(-1, ids)
    log_q_tail = torch.logsumexp(log_q.scatter(-1, ids, float("-inf")), -1)
    log_p_top, log_p_tail = logp.float(), tail.float()
    top = (log_p_top.exp() * (log_p_top - log_q_top)).sum(-1)
    has_tail = (log_p_tail > float("-inf")) & (log_q_tail > float("-inf"))
    return top + torch.where(has_tail, log_p_tail.exp() * (log_p_tail - log_q_tail), 0.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(3, 40), st.integers(1, 40), st.integers(0, 10_000), st.floats(0.5, 8.0))
def test_sparse_kl_gradient_equals_autograd_on_the_definition(n, v, k, seed, scale):
    """sparse_forward_kl computes its gradient by hand; peaked drafts (large scale) stress the tail term."""
    g = torch.Generator().manual_seed(seed)
    s, t = torch.randn(n, v, generator=g) * scale, torch.randn(n, v, generator=g) * 3
    ids, logp, tail = _cached(t, min(k, v))
    weights = torch.rand(n, generator=g)
    s1, s2 = s.clone().requires_grad_(True), s.clone().requires_grad_(True)
    loss = sparse_kl.sparse_forward_kl(s1, ids, logp, tail)
    (loss * weights).sum().backward()
    ref = _sparse_kl_by_autograd(s2, ids, logp, tail)
    (ref * weights).sum().backward()
    assert torch.allclose(loss, ref, atol=1e-5, rtol=1e-5)
    assert torch.allclose(s1.grad, s2.grad, atol=1e-5), (s1.grad - s2.grad).abs().max()


def test_sparse_kl_is_finite_when_the_draft_leaves_no_mass_outside_the_top_k():
    s = torch.tensor([[50.0, 0.0, -200.0, -200.0]], requires_grad=True)  # draft's tail mass underflows to 0
    ids, logp, tail = _cached(torch.tensor([[2.0, 1.0, 0.0, -1.0]]), 2)
    loss = sparse_kl.sparse_forward_kl(s, ids, logp, tail)
    loss.sum().backward()
    assert loss.isfinite().all() and s.grad.isfinite().all()


def _cache_cfg(tmp_path, tiny_target_dir, text_file, *extra):
    overrides = ["model/target=local", f"model.target.name_or_path={tiny_target_dir}", "data=files",
                 f"data.sources=[{{kind: files, path: '{text_file}', text_field: text}}]", "data.block_size=32",
                 "data.batch_size=2", "data.eval_batch_size=4", "data.val_tokens=64", f"paths.cache_dir={tmp_path / 'cache'}",
                 "top_k=8", "shard_blocks=16", "batch_size=4", *extra]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("cache_teacher", overrides=overrides)


def _script():
    spec = importlib.util.spec_from_file_location("cache_teacher", REPO / "scripts" / "cache_teacher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.integration
def test_interrupted_cache_job_resumes_and_training_runs_from_the_cache(tmp_path, tiny_target_dir, text_file,
                                                                        monkeypatch):
    script = _script()
    calls, real = [], teacher_cache.topk_of_target

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt("killed mid-way")
        return real(*args, **kwargs)
    monkeypatch.setattr(teacher_cache, "topk_of_target", flaky)
    with pytest.raises(KeyboardInterrupt):
        script.cache_teacher(_cache_cfg(tmp_path, tiny_target_dir, text_file))
    done_before = len(calls) - 1
    monkeypatch.setattr(teacher_cache, "topk_of_target", real)
    path = script.cache_teacher(_cache_cfg(tmp_path, tiny_target_dir, text_file))
    assert (path / teacher_cache.DONE).is_file()
    shards = sorted((path / "train").iterdir())
    assert len(shards) >= 2 and not list(path.glob(".shard-tmp-*"))
    # resumed output equals a fresh, uninterrupted cache
    fresh = script.cache_teacher(_cache_cfg(tmp_path, tiny_target_dir, text_file, f"out={tmp_path / 'fresh'}"))
    import datasets
    a = datasets.concatenate_datasets([datasets.load_from_disk(str(s)) for s in shards]).with_format("torch")
    b = datasets.concatenate_datasets([datasets.load_from_disk(str(s)) for s in sorted((fresh / "train").iterdir())])
    b = b.with_format("torch")
    assert len(a) == len(b) and torch.equal(a[:]["teacher_ids"], b[:]["teacher_ids"]) and done_before >= 4

    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "teacher=cache", "spec_eval.enabled=false",
                             "loss=forward_kl", "trainer.max_steps=4", f"paths.cache_dir={tmp_path / 'cache'}"))
    assert summary["steps"] == 4 and summary["teacher_cache_s"] is not None
    assert summary["after"]["val/kl"] < summary["before"]["val/kl"]  # it learned from the cached teacher
    assert 0 <= summary["after"]["val/expected_accept"] <= 1
    mixed = train(tiny_cfg(tmp_path / "bf16", tiny_target_dir, text_file, "teacher=cache", "spec_eval.enabled=false",
                           "loss=forward_kl", "trainer.max_steps=2", "trainer.precision=bf16-mixed",
                           f"paths.cache_dir={tmp_path / 'cache'}"))
    assert mixed["steps"] == 2 and mixed["after"]["val/kl"] < mixed["before"]["val/kl"]


def test_teacher_cache_settings_fail_clearly(tmp_path, tiny_target_dir, text_file):
    with pytest.raises(ValueError, match="spec_eval.enabled=false"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "teacher=cache", "loss=forward_kl"))
    with pytest.raises(ValueError, match="forward_kl"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "teacher=cache", "spec_eval.enabled=false", "loss=jsd"))
    with pytest.raises(ValueError, match="teacher_top_k"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "teacher=cache", "spec_eval.enabled=false",
                       "loss=forward_kl", "teacher_top_k=0"))


def test_teacher_cache_is_built_by_the_training_run_when_missing(tmp_path, tiny_target_dir, text_file):
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "teacher=cache", "spec_eval.enabled=false",
                             "loss=forward_kl", "teacher_top_k=8", "trainer.max_steps=2",
                             f"paths.cache_dir={tmp_path / 'cache'}"))
    built = sorted((tmp_path / "cache" / "teacher").glob(f"*/*-k8/{teacher_cache.DONE}"))
    assert len(built) == 1 and summary["steps"] == 2 and summary["teacher_cache_s"] is not None
    assert summary["after"]["val/kl"] < summary["before"]["val/kl"]  # it learned from the cache it built


def test_a_view_of_the_data_trains_from_the_cache_of_all_of_it(tmp_path, tiny_target_dir, text_file):
    """data.train_blocks (and data.train_sources) read rows of the one cache over every block: a learning-curve
    point builds no cache of its own (here the view's shards are all of it: one shard)."""
    common = ["teacher=cache", "spec_eval.enabled=false", "loss=forward_kl", "teacher_top_k=8", "trainer.max_steps=2",
              f"paths.cache_dir={tmp_path / 'cache'}"]
    summary = train(tiny_cfg(tmp_path / "part", tiny_target_dir, text_file, *common, "data.train_blocks=4"))
    train(tiny_cfg(tmp_path / "all", tiny_target_dir, text_file, *common))  # the view's build left nothing to do
    built = sorted((tmp_path / "cache" / "teacher").glob(f"*/*-k8/{teacher_cache.DONE}"))
    assert len(built) == 1 and summary["steps"] == 2 and summary["teacher_cache_s"] is not None
    assert summary["setup"]["train_blocks"] == 4
    with pytest.raises(ValueError, match="data.train_blocks"):
        train(tiny_cfg(tmp_path / "bad", tiny_target_dir, text_file, *common, "data.train_blocks=0"))


def test_a_view_builds_only_its_shards_and_reads_them_before_the_cache_is_complete(tmp_path):
    """build_cache with a view's rows builds the shards holding them (no done.json yet); load_cache reads exactly
    those rows, equal to a complete cache's, and refuses rows not built; a run without the view completes it."""
    import datasets

    from conftest import make_model
    from data.teacher_cache_files import load_cache

    target = make_model(64)
    torch.manual_seed(0)
    blocks = {"train": datasets.Dataset.from_dict({"input_ids": torch.randint(3, 64, (9, 8)).tolist()}),
              "val": datasets.Dataset.from_dict({"input_ids": torch.randint(3, 64, (2, 8)).tolist()})}
    assert teacher_cache.shard_starts(9, 2, [5, 4, 0]) == [0, 4] and teacher_cache.shard_starts(9, 4) == [0, 4, 8]
    part = teacher_cache.build_cache(target, blocks, tmp_path / "part", 4, batch_size=2, shard_blocks=2,
                                     rows={"train": [0, 1, 5], "val": None})
    assert sorted(p.name for p in (part / "train").iterdir()) == ["00000000", "00000004"]
    assert not (part / teacher_cache.DONE).exists()
    full = teacher_cache.build_cache(target, blocks, tmp_path / "full", 4, batch_size=2, shard_blocks=2)
    mine, whole = load_cache(part, "train", 9, [0, 1, 5]), load_cache(full, "train", 9)
    assert len(mine) == 9 and all(torch.equal(mine[i]["teacher_ids"], whole[i]["teacher_ids"]) for i in (0, 1, 4, 5))
    with pytest.raises(FileNotFoundError, match="No complete teacher cache"):
        load_cache(part, "train", 9, [0, 2])  # row 2's shard is not built
    with pytest.raises(IndexError, match="not built yet"):
        mine[2]
    assert len(load_cache(part, "val", 2)) == 2  # every val row's shard is there
    teacher_cache.build_cache(target, blocks, tmp_path / "part", 4, batch_size=2, shard_blocks=2)
    assert (part / teacher_cache.DONE).is_file() and len(list((part / "train").iterdir())) == 5


def test_a_final_state_draft_reuses_a_finished_eagle3_cache_of_the_same_text(tmp_path):
    plain = tmp_path / "teacher" / "t" / "data-features"
    assert teacher_cache.reuse_richer_cache(plain) == plain  # nothing cached: build the plain cache
    unfinished = tmp_path / "teacher" / "t" / "data-features-aux-1-2-3"
    unfinished.mkdir(parents=True)
    assert teacher_cache.reuse_richer_cache(plain) == plain  # an interrupted EAGLE-3 cache is not read
    (unfinished / teacher_cache.DONE).write_text("")
    assert teacher_cache.reuse_richer_cache(plain) == unfinished
    other_text = tmp_path / "teacher" / "t" / "other-features"
    assert teacher_cache.reuse_richer_cache(other_text) == other_text  # another text's cache is never read
    plain.mkdir()
    (plain / teacher_cache.DONE).write_text("")
    assert teacher_cache.reuse_richer_cache(plain) == plain  # its own cache first
