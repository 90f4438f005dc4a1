"""Drafts that read the target's own hidden states: Medusa heads and an EAGLE-style one-layer feature draft.

A *feature* here is the target's last hidden state at a position, after its final norm: the vector its LM head
reads (`final_hidden`). Both drafts share the target's embeddings and LM head (frozen, never stored in their
weights): they are attached at build or load time (`attach`), as serving engines attach them from the verifier.

- `MedusaHeads` (Medusa-1): head k (k = 1..K) maps the feature at position t through its residual blocks to a
  vector the target's LM head turns into a guess of token t+1+k. One verify pass gives the feature; the K heads
  draft K tokens at once, independently of each other (no draft cache, no autoregression).
- `EagleDraft` (EAGLE-1 with HASS-style norms, speculators' layout): slot t reads the feature at t and the
  embedding of token t+1 (`fusion_fc` over their concatenation), runs one decoder layer of the target's own
  architecture over the slots so far (its own KV cache), and predicts the feature at t+1, whose logits (through
  `pre_lm_head_layernorm` and the LM head) guess token t+2. Drafting continues autoregressively by feeding its own
  output back as the next slot's feature.

Every kind is one FeatureDraft subclass, found through decode/drafts/kinds.py's registry: it builds itself (`build`,
`from_config`) and describes its serving layout (`serving_config`, `serving_state`), which
decode/drafts/feature_export.py writes and reads. Layouts:

- Medusa: vLLM's (`model_type: medusa`, `num_heads`, `num_hidden_layers`, weights `blocks.{i}.layers.{j}.weight/bias`),
  with Medusa's own keys (`medusa_num_heads`, `medusa_num_layers`, `base_model_name_or_path`); the heads share one
  LM head (`original_lm_head: true`), the target's, of which the export stores a copy (vLLM loads it from there).
- EAGLE-style: the `speculators` layout vLLM loads (HASS-style norms: `layernorms: true`, `transformer_layer_config` =
  the target's config cut to one layer, `speculators_config` naming the verifier); weights `embedding_layernorm`,
  `fusion_fc`, `transformer.*`, `pre_lm_head_layernorm`. Embeddings and LM head come from the verifier.

    draft = EagleDraft.from_target(target)        # or MedusaHeads.from_target(target, num_heads=3)
"""

from __future__ import annotations

import copy
import re

import torch
from torch import nn
from transformers import AutoModelForCausalLM, PretrainedConfig

from decode.drafts.features import final_hidden  # noqa: F401  (where callers have always found it)
from decode.drafts.kinds import FEATURE_KINDS


def is_feature_draft(model) -> bool:
    return getattr(model, "draft_kind", None) in FEATURE_KINDS


def speculators_config(algorithm: str, target_name: str, target_architectures: list[str], gamma: int) -> dict:
    """The `speculators_config` block of a speculators layout: greedy proposals of `gamma` tokens for that verifier."""
    return {"algorithm": algorithm, "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": gamma, "verifier_accept_k": 1,
                                  "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": target_name, "architectures": list(target_architectures)}}


def layer_config_dict(draft) -> dict:
    """The draft layer's transformers config as a plain dict (without the attention backend we run it with)."""
    layer = draft.layer_config.to_dict()
    layer.pop("_attn_implementation", None)
    return layer


class _Shared:
    """The target's embeddings and LM head, held without registering them as submodules: they stay out of the draft's
    state_dict, optimizer and checkpoints, and move with the target."""

    def __init__(self, embed: nn.Module | None, head: nn.Module | None):
        self.embed, self.head = embed, head

    def __deepcopy__(self, memo):  # a copy of the draft (decoding with a cut head, say) still shares the target's
        return self


class FeatureDraft(nn.Module):
    draft_kind = ""

    def attach(self, target) -> "FeatureDraft":
        """Share `target`'s embeddings and LM head (checked against this draft's hidden size)."""
        head = target.get_output_embeddings()
        if head.weight.shape[1] != self.hidden_size:
            raise ValueError(f"This {self.draft_kind} draft has hidden size {self.hidden_size}, the target "
                             f"{head.weight.shape[1]}: it was trained for another target. Fix: use the target named in "
                             "its config.json (speculators_config.verifier / base_model_name_or_path).")
        self._shared = _Shared(target.get_input_embeddings(), head)
        return self

    def get_output_embeddings(self):
        return self._shared.head

    def set_output_embeddings(self, head):  # decode/drafts/draft_vocab.py cuts the head for decoding: this draft only
        self._shared = _Shared(self._shared.embed, head)

    def get_input_embeddings(self):
        return self._shared.embed

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def config(self) -> PretrainedConfig:
        """What rebuilds this draft (`config_dict`), as a transformers config (checkpoints store its to_dict)."""
        return PretrainedConfig(**self.config_dict(), num_hidden_layers=self.num_layers)

    # What each kind defines (decode/drafts/kinds.py's registry finds the class):
    @classmethod
    def build(cls, target, **options) -> "FeatureDraft":
        """A new draft for `target` from model.draft's options (each kind reads its own; the rest are ignored)."""
        raise NotImplementedError

    @classmethod
    def from_config(cls, config: dict) -> "FeatureDraft":
        """A fresh (unattached) draft of the shape `config_dict()` describes."""
        raise NotImplementedError

    def serving_config(self, target_name: str, target_architectures: list[str], gamma: int = 3,
                       draft_vocab_size: int | None = None) -> dict:
        """config.json of the serving layout, measured against `target_name`."""
        raise NotImplementedError

    def serving_state(self) -> dict[str, torch.Tensor]:
        """The weights under the serving layout's names (contiguous copies)."""
        return {k: v.detach().contiguous().clone() for k, v in self.state_dict().items()}

    def state_from_serving(self, state: dict, folder) -> dict:
        """The serving layout's weights (head keys already dropped) under this module's names."""
        return state


_MEDUSA_OURS = re.compile(r"^blocks\.(\d+)\.layers\.(\d+)\.linear\.")
_MEDUSA_THEIRS = re.compile(r"^blocks\.(\d+)\.layers\.(\d+)\.")


class ResBlock(nn.Module):
    """x + SiLU(W x + b), W zero at init: a new head starts as the target's own next-token head."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        return x + nn.functional.silu(self.linear(x))


class _Block(nn.Module):
    def __init__(self, hidden_size: int, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList(ResBlock(hidden_size) for _ in range(num_layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class MedusaHeads(FeatureDraft):
    draft_kind = "medusa"

    def __init__(self, hidden_size: int, vocab_size: int, num_heads: int = 3, num_layers: int = 1):
        super().__init__()
        if num_heads < 1 or num_layers < 1:
            raise ValueError(f"model.draft.num_heads and num_layers must be >= 1, got {num_heads}, {num_layers}.")
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        self.num_heads, self.num_layers = num_heads, num_layers
        self.blocks = nn.ModuleList(_Block(hidden_size, num_layers) for _ in range(num_heads))
        self._shared = _Shared(None, None)

    @classmethod
    def build(cls, target, num_heads: int = 3, num_layers: int = 1, **_) -> "MedusaHeads":
        return cls.from_target(target, num_heads, num_layers)

    @classmethod
    def from_config(cls, config: dict) -> "MedusaHeads":
        return cls(config["hidden_size"], config["vocab_size"], config["num_heads"], config["num_layers"])

    def serving_config(self, target_name, target_architectures, gamma=3, draft_vocab_size=None) -> dict:
        return {"model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": self.hidden_size,
                "vocab_size": self.vocab_size, "truncated_vocab_size": None, "num_heads": self.num_heads,
                "num_hidden_layers": self.num_layers, "original_lm_head": True, "max_paths": 64, "topk": 10,
                "medusa_num_heads": self.num_heads, "medusa_num_layers": self.num_layers,
                "base_model_name_or_path": target_name}

    def serving_state(self) -> dict:  # ours: ResBlock.linear; vLLM's: the Linear itself
        return {_MEDUSA_OURS.sub(r"blocks.\1.layers.\2.", k): v for k, v in super().serving_state().items()}

    def state_from_serving(self, state, folder) -> dict:
        return {_MEDUSA_THEIRS.sub(r"blocks.\1.layers.\2.linear.", k): v for k, v in state.items()}

    @classmethod
    def from_target(cls, target, num_heads: int = 3, num_layers: int = 1) -> "MedusaHeads":
        head = target.get_output_embeddings()
        return cls(head.weight.shape[1], head.weight.shape[0], num_heads, num_layers).to(head.weight.dtype).attach(target)

    def head_states(self, features: torch.Tensor, heads: int | None = None) -> list[torch.Tensor]:
        """Per head k = 1..heads, the vector its LM head reads: head k guesses the token k+1 after `features`' own."""
        return [block(features) for block in self.blocks[: heads or self.num_heads]]

    def config_dict(self) -> dict:
        return {"draft_kind": self.draft_kind, "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
                "num_heads": self.num_heads, "num_layers": self.num_layers}


def layer_parts(config):
    """The decoder-layer, norm and rotary-embedding classes of a transformers architecture (built on the meta
    device: no weights allocated)."""
    with torch.device("meta"):
        shell = AutoModelForCausalLM.from_config(config)
    decoder = shell.get_decoder()
    return type(decoder.layers[0]), type(decoder.norm), type(decoder.rotary_emb)


def rebuilt_layer_config(config: dict):
    """The draft layer's transformers config from a `config_dict()`'s `layer_config`."""
    from transformers import AutoConfig

    layer = dict(config["layer_config"])
    layer_config = AutoConfig.for_model(layer.pop("model_type"), **layer)
    layer_config._attn_implementation = "sdpa"
    return layer_config


def one_layer_config(target_config):
    """The target's config cut to one decoder layer (of its last kind), attention through SDPA with our masks."""
    config = copy.deepcopy(target_config)
    config.num_hidden_layers = 1
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[-1:]
    config._attn_implementation = "sdpa"
    return config


class EagleDraft(FeatureDraft):
    draft_kind = "eagle"
    aux_layers = None  # reads the target's final hidden states (EAGLE-3 reads some layers' inputs)

    def __init__(self, layer_config):
        super().__init__()
        self.layer_config, self.num_layers = layer_config, 1
        self.hidden_size, self.vocab_size = layer_config.hidden_size, layer_config.vocab_size
        layer_cls, norm_cls, rotary_cls = layer_parts(layer_config)
        eps = getattr(layer_config, "rms_norm_eps", 1e-6)
        self.embedding_layernorm = norm_cls(self.hidden_size, eps=eps)
        self.fusion_fc = nn.Linear(2 * self.hidden_size, self.hidden_size, bias=False)
        self.transformer = layer_cls(layer_config, layer_idx=0)
        self.pre_lm_head_layernorm = norm_cls(self.hidden_size, eps=eps)
        self.rotary_emb = rotary_cls(config=layer_config)
        self._shared = _Shared(None, None)

    @classmethod
    def build(cls, target, init_layer: int | None = -1, **_) -> "EagleDraft":
        return cls.from_target(target, init_layer)

    @classmethod
    def from_config(cls, config: dict) -> "EagleDraft":
        return cls(rebuilt_layer_config(config))

    def serving_config(self, target_name, target_architectures, gamma=3, draft_vocab_size=None) -> dict:
        return {"architectures": ["EagleSpeculator"], "speculators_model_type": self.draft_kind,
                "transformer_layer_architecture": type(self.transformer).__name__,
                "transformer_layer_config": layer_config_dict(self), "layernorms": True, "fusion_bias": False,
                "speculators_config": speculators_config(self.draft_kind, target_name, target_architectures, gamma)}

    @classmethod
    def from_target(cls, target, init_layer: int | None = -1) -> "EagleDraft":
        """A draft for `target`; its decoder layer and pre-head norm start as copies of the target's layer
        `init_layer` and final norm (None: fresh), its fusion as [0 | I] (the feature passes, the token is ignored)."""
        config = one_layer_config(target.config)
        dtype = target.get_output_embeddings().weight.dtype
        draft = cls(config).to(dtype)
        decoder = target.get_decoder()
        with torch.no_grad():
            if init_layer is not None:
                draft.transformer.load_state_dict(decoder.layers[init_layer].state_dict())
            draft.pre_lm_head_layernorm.load_state_dict(decoder.norm.state_dict())
            draft.fusion_fc.weight.zero_()
            draft.fusion_fc.weight[:, draft.hidden_size:].copy_(torch.eye(draft.hidden_size))
        return draft.attach(target)

    def forward(self, features: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """Slots (B, S): features (B, S, H) and the ids of the tokens after them (B, S) at `positions` (B, S) ->
        the predicted next features (B, S, H), before the pre-head norm (what the next slot reads back). `mask`:
        additive (B, 1, S, past + S), or None for causal over the slots; `cache`: the layer's KV cache."""
        embeds = self.embedding_layernorm(self.get_input_embeddings()(next_ids))
        x = self.fusion_fc(torch.cat([embeds, features.to(embeds.dtype)], dim=-1))
        if mask is None:
            past = cache.get_seq_length() if cache is not None else 0
            mask = causal_mask(x.shape[1], past, x.dtype, x.device)
        return self.transformer(x, attention_mask=mask, position_ids=positions,
                                position_embeddings=self.rotary_emb(x, positions), cache=cache,
                                use_cache=cache is not None)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The target's features as a slot reads them: as they are (EAGLE-3's maps several layers' to one)."""
        return features

    def head_input(self, predicted: torch.Tensor) -> torch.Tensor:
        """What the LM head reads from a predicted feature."""
        return self.pre_lm_head_layernorm(predicted)

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        return self.get_output_embeddings()(self.head_input(predicted))

    def config_dict(self) -> dict:
        return {"draft_kind": self.draft_kind, "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
                "layer_config": self.layer_config.to_dict()}


def causal_mask(queries: int, past: int, dtype, device) -> torch.Tensor:
    """Additive mask (1, 1, queries, past + queries): each new slot sees every cached slot and the new ones up to
    itself."""
    allowed = torch.ones(queries, past + queries, dtype=torch.bool, device=device).tril(past)
    return additive(allowed, dtype)


def additive(allowed: torch.Tensor, dtype) -> torch.Tensor:
    """A boolean (Q, K) allowed-matrix as SDPA's additive (1, 1, Q, K) mask."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]


def unroll_allowed(length: int, steps: int) -> torch.Tensor:
    """Training-time test (EAGLE-3): which keys each query may attend when `steps` drafting depths of `length` slots
    each are stacked into one sequence of steps * length. Depth s, slot i stands for the s-th drafted token after a
    context whose true features end at slot i-s+1: it sees depth 1 (true features) at slots <= i-s+1 and depth r at
    slot i-(s-r) for r = 2..s (its own earlier guesses), as in decoding. Pure."""
    i = torch.arange(length)
    blocks = []
    for s in range(steps):  # query depth s+1
        row = []
        for r in range(steps):  # key depth r+1
            if r == 0:
                row.append(i[None, :] <= i[:, None] - s)
            elif r <= s:
                row.append(i[None, :] == i[:, None] - (s - r))
            else:
                row.append(torch.zeros(length, length, dtype=torch.bool))
        blocks.append(torch.cat(row, dim=1))
    return torch.cat(blocks, dim=0)  # every query sees at least itself (r = s): no empty row, no NaN


def crop_cache(cache, keep: int) -> None:
    """Keep the first `keep` slots (transformers 5's `crop` takes minus the count to drop)."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)
