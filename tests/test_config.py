"""Every config group option composes; `+domain=...` switches the data; bad group values fail clearly."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from conftest import CONF


def compose_distill(overrides=()):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("distill", overrides=["paths.output_dir=/tmp/x", *overrides])


GROUPS = ["model/target", "model/draft", "data", "loss", "optim", "trainer", "logger", "paths"]


@pytest.mark.parametrize("group,option", [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))])
def test_every_group_option_composes(group, option):
    cfg = compose_distill([f"{group}={option}"])
    OmegaConf.to_container(cfg, resolve=True)  # interpolations resolve (??? fields stay for the user to fill)


@pytest.mark.parametrize("domain", sorted(p.stem for p in (CONF / "domain").glob("*.yaml")))
def test_plus_domain_switches_data(domain):
    cfg = compose_distill([f"+domain={domain}"])  # the target's answers to the domain's prompts
    assert cfg.data.name == f"generated-{domain}" and cfg.data.prompts_from == domain
    assert cfg.data.store.endswith(f"{domain}.jsonl")
    assert cfg.task_name == f"distill-{domain}"
    assert compose_distill([f"+domain={domain}", f"data={domain}"]).data.name == domain  # its reference text
    default = compose_distill()
    assert (default.data.name, default.loss.name) == ("generated-general", "jsd")  # the study's winner


def test_domain_is_not_in_the_defaults_list():
    defaults = OmegaConf.load(CONF / "distill.yaml").defaults
    assert not any("domain" in (d if isinstance(d, str) else " ".join(d)) for d in defaults)


def test_unknown_group_value_names_the_options():
    with pytest.raises(ConfigCompositionException, match="medical"):
        compose_distill(["data=not_a_dataset"])


def test_cli_interface_keys_exist():
    cfg = compose_distill(["trainer.max_steps=20"])
    assert cfg.trainer.max_steps == 20
    assert cfg.export.dir == "/tmp/x/export"
    assert Path(cfg.paths.cache_dir).is_absolute()


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_every_experiment_composes(name):
    cfg = compose_distill([f"+experiment={name}"])
    OmegaConf.to_container(cfg, resolve=True)
    if name == "medical_finetune":  # medical answers with general ones replayed, 3:1
        assert [s.weight for s in cfg.data.sources] == [3, 1] and cfg.data.sources[0].path.endswith("medical.jsonl")
    if name == "longer":  # 4x the steps on 800 answers per store, kept apart from the default run's 400
        assert (cfg.trainer.max_steps, cfg.data.generate.n_prompts, cfg.optim.lr) == (640, 800, 2e-3)
        assert [Path(s.path).name for s in cfg.data.sources] == ["general-800.jsonl", "general-800-t1.jsonl"]
    if name in ("qwen_coder", "qwen_coder_layers"):  # the quick recipe's store, 4x the answers, the ids they use most
        assert [Path(s.path).name for s in cfg.data.sources] == ["code.jsonl"]
        assert cfg.data.generate.n_prompts == 400
        assert cfg.trainer.max_steps == (80 if name == "qwen_coder" else 400)
        assert cfg.model.draft.train_vocab_from.path == cfg.data.sources[0].path
        assert cfg.data.sources[0].max_records == cfg.model.draft.train_vocab_from.max_records == 400
    if name in ("qwen_coder_quick", "qwen_coder_layers_quick"):  # the shared store's first 96 answers, however many
        assert cfg.data.sources[0].max_records == 96                 # later runs add
    if name in ("qwen_coder_quick", "qwen_coder"):  # the whole 0.5B, LoRA, forward KL against the live 1.5B
        assert (cfg.model.draft.kind, cfg.lora.enabled, cfg.loss.name, cfg.teacher) == (
            "pretrained", True, "forward_kl", "live")
        assert (cfg.model.draft.train_embeddings, cfg.model.draft.train_vocab) == (False, 8192)
    if name == "qwen_coder_eagle":  # an EAGLE-style draft trained from the 1.5B's cached features
        from train.distill import check_config

        assert (cfg.model.draft.kind, cfg.teacher, cfg.spec_eval.enabled) == ("eagle", "cache", False)
        assert Path(cfg.data.sources[0].path).name == "code.jsonl"  # the quick recipe's answers
        assert cfg.model.draft.train_vocab_from.path == cfg.data.sources[0].path  # its head: the ids they use most
        check_config(cfg)
    if name in ("eagle_general", "standalone_general"):  # the pair compared in docs/feature-drafts.md: the same
        from train.distill import check_config           # answers (all 976 prompts, stores of their own), head ids

        assert [Path(s.path).name for s in cfg.data.sources] == [
            "general-976.jsonl", "general-976-t1.jsonl", "general-976-t1-s1.jsonl", "everyday-976.jsonl",
            "everyday-976-t1.jsonl"]
        assert [(s.get("prompts_from"), s.get("temperature")) for s in cfg.data.sources[3:]] == [
            ("everyday", 0.0), ("everyday", 1.0)]
        assert cfg.data.generate.n_prompts == 976
        assert cfg.model.draft.train_vocab_from.path == cfg.data.sources[0].path
        assert (cfg.model.draft.kind, cfg.teacher) == (
            ("eagle", "cache") if name == "eagle_general" else ("truncated", "live"))
        check_config(cfg)


def test_study_arms_pin_their_data_whatever_the_default():
    """The study's arms must reproduce after the default data changes: each names its own."""
    def store_names(cfg):
        return [Path(s.path).name if s.kind == "files" else s.name for s in cfg.data.sources]

    for arm in ("ce", "forward_kl", "reverse_kl", "jsd", "tvd"):
        assert store_names(compose_distill([f"+experiment=study_{arm}"])) == ["python_docs"]
    assert store_names(compose_distill(["+experiment=study_generated"])) == ["general.jsonl"]
    assert store_names(compose_distill(["+experiment=study_onpolicy"])) == ["general.jsonl"]
    assert store_names(compose_distill(["+experiment=study_generated_t1"])) == ["general-t1.jsonl"]
    assert store_names(compose_distill(["+experiment=study_generated_mix"])) == ["general.jsonl", "general-t1.jsonl"]
    assert store_names(compose_distill(["+experiment=study_medical_lora"])) == ["medical.jsonl"]
    assert store_names(compose_distill([])) == ["general.jsonl", "general-t1.jsonl"]  # the default: vi-mix


def test_study_arms_pin_the_learning_rate_they_were_measured_at():
    arms = [f.stem for f in (CONF / "experiment").glob("study_*.yaml")] + ["medical_finetune"]
    assert len(arms) == 11
    for arm in arms:
        assert compose_distill([f"+experiment={arm}"]).optim.lr == 1e-3, arm
    assert compose_distill([]).optim.lr == 2e-3  # the default recipe's, from the 160-step comparison


def test_all_domains_generates_every_store_it_reads():
    from train.distill import generated_stores

    stores = {path.name: (t, domain) for path, t, domain, _ in generated_stores(compose_distill(["+experiment=all_domains"]))}
    assert stores == {"general.jsonl": (0.0, "general"), "general-t1.jsonl": (1.0, "general"),
                      "medical.jsonl": (0.0, "medical"), "medical-t1.jsonl": (1.0, "medical"),
                      "code.jsonl": (0.0, "code"), "code-t1.jsonl": (1.0, "code")}
    default = {path.name: (t, d) for path, t, d, _ in generated_stores(compose_distill())}
    assert default == {"general.jsonl": (0.0, "general"), "general-t1.jsonl": (1.0, "general")}
    greedy_only = generated_stores(compose_distill(["data=generated_greedy"]))
    assert [(p.name, t) for p, t, _, _ in greedy_only] == [("general.jsonl", 0.0)]
    assert generated_stores(compose_distill(["data=medical"])) == []  # reference text: nothing to generate


def test_a_second_sampled_store_of_the_same_prompts_gets_its_own_seed():
    from train.distill import generated_stores

    for experiment in ("eagle_general", "standalone_general"):
        stores = {p.name: (t, domain, seed)
                  for p, t, domain, seed in generated_stores(compose_distill([f"+experiment={experiment}"]))}
        assert stores == {"general-976.jsonl": (0.0, "general", 0), "general-976-t1.jsonl": (1.0, "general", 0),
                          "general-976-t1-s1.jsonl": (1.0, "general", 1), "everyday-976.jsonl": (0.0, "everyday", 0),
                          "everyday-976-t1.jsonl": (1.0, "everyday", 0)}, experiment


def test_spec_eval_prompts_come_from_the_runs_domains():
    from train.distill import spec_eval_domains

    assert spec_eval_domains(compose_distill()) == ["general"]
    assert spec_eval_domains(compose_distill(["+domain=code"])) == ["code"]
    assert spec_eval_domains(compose_distill(["+domain=code", "spec_eval.domain=medical"])) == ["medical"]
    assert spec_eval_domains(compose_distill(["+experiment=all_domains"])) == ["general", "medical", "code"]
