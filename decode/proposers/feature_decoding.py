"""Decoding with drafts that read the target's features (decode/drafts/feature_drafts.py), through the main loop.

`FeatureVerifier` is the chain verifier that also keeps the target's final hidden state at every position it has
cached (rolled back with the cache): the features come from the verify pass that already ran, so a feature draft
costs no target pass and no draft prefill of its own. `MedusaProposer` and `EagleProposer` bring it as their
verifier (`make_verifier`) and read it when they draft. `MedusaTreeProposer` drafts Medusa's natural shape, a token
tree (head k's top candidates at depth k, static or dynamic like decode/proposers/tree.py's), verified greedily by
`FeatureTreeVerifier`, which keeps the features of the accepted path.

Both keep the main loop's laws: the target's pass is unchanged (greedy output identical), and when sampling they
return the distribution each token was drawn from, so accept/reject stays lossless. With `confidence_threshold`
they stop after a drafted token they give less probability than that (as DraftModelProposer does).

    proposer = draft_proposer(draft)          # any draft: a feature draft's proposer or DraftModelProposer
    generate(target, proposer, prompt, gamma=3, max_new_tokens=64)
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from decode.core.sampling import sample
from decode.core.speculative import ChainVerifier, draft_confidence
from decode.core.trees import TreeDraft, full_mask, tree_positions
from decode.drafts.feature_drafts import crop_cache, is_feature_draft
from decode.drafts.features import layer_inputs
from decode.drafts.kinds import kind_of_draft
from decode.proposers.draft_model import DraftModelProposer
from decode.proposers.tree import TreeVerifier, choose_children, tree_levels


def _feature_width(model, aux_layers) -> int:
    hidden = model.get_output_embeddings().weight.shape[1]
    return hidden * len(aux_layers) if aux_layers is not None else hidden


class FeatureRows:
    """The features of the cached positions, (length, width) float32, in a buffer that grows by doubling: appending a
    step's rows and cutting back to a length cost those rows, not the whole history (a step would otherwise copy every
    earlier position's features). `view()` is the (length, width) tensor the drafts read."""

    def __init__(self, width: int, device):
        self.rows, self.length = torch.empty(64, width, dtype=torch.float32, device=device), 0

    def view(self) -> torch.Tensor:
        return self.rows[: self.length]

    def append(self, new: torch.Tensor) -> None:
        end = self.length + len(new)
        if end > len(self.rows):
            grown = torch.empty(max(end, 2 * len(self.rows)), self.rows.shape[1], dtype=self.rows.dtype,
                                device=self.rows.device)
            grown[: self.length] = self.rows[: self.length]
            self.rows = grown
        self.rows[self.length: end] = new
        self.length = end

    def cut(self, length: int) -> None:
        self.length = min(self.length, length)


class _KeepsFeatures:
    """What both feature verifiers share: `features`, the (length, width) rows of their FeatureRows buffer."""

    _rows: FeatureRows | None = None

    @property
    def features(self) -> torch.Tensor | None:
        return None if self._rows is None else self._rows.view()


class FeatureVerifier(_KeepsFeatures, ChainVerifier):
    """ChainVerifier keeping `features` (length, H): the target's final hidden state at each cached position, or
    with `aux_layers` what enters those layers, concatenated (length, len(aux_layers) * H), as an EAGLE-3 draft
    reads (decode/drafts/features.py)."""

    def __init__(self, target, aux_layers: list[int] | None = None):
        super().__init__(target)
        self._rows, self.aux_layers = None, aux_layers

    def start(self, prompt):
        self.lm.reset()
        if self.lm.static is not None:
            raise ValueError("Feature drafts read the target's hidden states, which the compiled "
                             "static-cache path does not return. Fix: compile=false.")
        self._rows = FeatureRows(_feature_width(self.lm.model, self.aux_layers), self.lm.model.device)
        if len(prompt) > 1:
            self._extend(prompt[:-1], keep=1)

    @torch.inference_mode()
    def _extend(self, ids: list[int], keep: int) -> torch.Tensor:
        lm = self.lm
        out, aux = layer_inputs(lm.model, torch.tensor([ids], device=lm.model.device), self.aux_layers,
                                cache=lm.cache, use_cache=True)
        hidden = out.last_hidden_state[0]
        lm.length += len(ids)
        self._rows.append(hidden if aux is None else aux[0])
        return lm.model.get_output_embeddings()(hidden[-keep:]).float()

    def score(self, tokens, drafted):
        return self._extend(tokens[self.lm.length:] + drafted, keep=len(drafted) + 1)

    def rollback(self, keep):
        self.lm.rollback(keep)
        self._rows.cut(keep)


class _FeatureProposer:
    def __init__(self, draft, confidence_threshold: float = 0.0):
        if not 0.0 <= confidence_threshold < 1.0:
            raise ValueError(f"confidence_threshold must be in [0, 1), got {confidence_threshold}.")
        self.draft, self.threshold = draft, confidence_threshold
        self.verifier: FeatureVerifier | None = None

    def make_verifier(self, target) -> FeatureVerifier:
        self.verifier = FeatureVerifier(target, getattr(self.draft, "aux_layers", None))
        return self.verifier

    def _features(self) -> torch.Tensor:
        if self.verifier is None:
            raise RuntimeError("A feature draft reads the verifier's hidden states: let generate() build its verifier "
                               "(do not pass verifier=...).")
        return self.verifier.features

    def _pick(self, logits: torch.Tensor, params, generator) -> tuple[int, torch.Tensor | None, float]:
        """(token, the distribution it was drawn from or None when greedy, the draft's confidence in it)."""
        if params.temperature == 0:
            token = int(logits.argmax())
            return token, None, draft_confidence(logits, token) if self.threshold else 1.0
        q = params.probs(logits)
        token = int(sample(q, generator))
        return token, q, float(q[token])

    def start(self, prompt):
        pass

    def rollback(self, keep):
        pass


class MedusaProposer(_FeatureProposer):
    """Up to min(gamma, K) tokens, head k's guess for the token k after the pending one."""

    @torch.inference_mode()
    def propose(self, tokens, gamma, params, generator):
        features = self._features()
        if gamma == 0 or len(features) < len(tokens) - 1 or len(tokens) < 2:
            return [], torch.empty(0)
        feature = features[len(tokens) - 2][None].to(self.draft.device, next(self.draft.parameters()).dtype)
        head = self.draft.get_output_embeddings()
        drafted, probs = [], []
        for state in self.draft.head_states(feature, min(gamma, self.draft.num_heads)):
            token, q, conf = self._pick(head(state)[0].float(), params, generator)
            drafted.append(token)
            if q is not None:
                probs.append(q)
            if conf < self.threshold:
                break
        return drafted, torch.stack(probs) if probs else torch.empty(0)


class EagleProposer(_FeatureProposer):
    """The one-layer draft over the target's features, autoregressive over its own predicted features. Its KV cache
    holds one slot per position whose true feature is known; slots of guessed features are dropped after each step."""

    def start(self, prompt):
        self.cache = DynamicCache(config=self.draft.layer_config)
        self.length = 0  # true slots cached: slot j read the feature at j and token j+1
        self.last = None  # the last true slot's predicted next feature
        self._catch_up(prompt)

    @torch.inference_mode()
    def _catch_up(self, tokens: list[int]) -> torch.Tensor | None:
        """Feed every slot whose feature and next token are known; the last one's predicted next feature (None
        before any slot)."""
        m = len(tokens) - 1
        features = self._features()
        if m > self.length and len(features) >= m:
            device = self.draft.device
            ids = torch.tensor([tokens[self.length + 1: m + 1]], device=device)
            positions = torch.arange(self.length, m, device=device)[None]
            out = self.draft(self.draft.fuse(features[self.length: m][None].to(device)), ids, positions,
                             cache=self.cache)
            self.length, self.last = m, out[:, -1:]
        return self.last if self.length == m else None

    @torch.inference_mode()
    def propose(self, tokens, gamma, params, generator):
        predicted = self._catch_up(tokens) if gamma else None
        if predicted is None:
            return [], torch.empty(0)
        m, device = self.length, self.draft.device
        drafted, probs = [], []
        for i in range(gamma):
            token, q, conf = self._pick(self.draft.logits(predicted[0, -1]).float(), params, generator)
            drafted.append(token)
            if q is not None:
                probs.append(q)
            if i + 1 == gamma or conf < self.threshold:
                break
            predicted = self.draft(predicted, torch.tensor([[token]], device=device),
                                   torch.tensor([[m + i]], device=device), cache=self.cache)
        crop_cache(self.cache, self.length)  # the guessed slots go; the true ones stay
        return drafted, torch.stack(probs) if probs else torch.empty(0)

    def rollback(self, keep):
        if self.length > keep:  # never in the main loop (true slots end before the kept tokens); kept for safety
            crop_cache(self.cache, keep)
            self.length, self.last = keep, None


class FeatureTreeVerifier(_KeepsFeatures, TreeVerifier):
    """TreeVerifier keeping `features` (length, H) as FeatureVerifier does (final hidden states, or `aux_layers`'
    inputs). A tree pass gives every node the hidden states a pass over its own path would (decode/proposers/tree.py's mask
    and positions), so keeping the accepted path keeps exactly the features a chain over it would have left."""

    def __init__(self, target, aux_layers: list[int] | None = None):
        super().__init__(target)
        self._rows, self._tree_hidden, self.aux_layers = None, None, aux_layers

    def start(self, prompt):
        self._rows = FeatureRows(_feature_width(self.model, self.aux_layers), self.model.device)
        super().start(prompt)

    def _hidden(self, ids: list[int], **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """(final hidden states, the features kept) of one pass over `ids`."""
        out, aux = layer_inputs(self.model, torch.tensor([ids], device=self.model.device), self.aux_layers,
                                cache=self.cache, use_cache=True, **kwargs)
        hidden = out.last_hidden_state[0]
        return hidden, hidden if aux is None else aux[0]

    def _chain(self, ids, keep):
        hidden, kept = self._hidden(ids)
        self.length += len(ids)
        self._rows.append(kept)
        return self.model.get_output_embeddings()(hidden[-keep:]).float()

    def _tree_logits(self, tree):
        device, dtype = self.model.device, next(self.model.parameters()).dtype
        hidden, kept = self._hidden(tree.tokens, attention_mask=full_mask(tree.parents, self.length, dtype).to(device),
                                    position_ids=tree_positions(tree.parents, self.length).to(device)[None])
        self._tree_hidden = kept.float()
        return self.model.get_output_embeddings()(hidden).float()

    @torch.inference_mode()
    def keep_path(self, path):
        start = self._tree_start
        super().keep_path(path)
        self._rows.cut(start)
        self._rows.append(self._tree_hidden[[0] + list(path)])
        self._tree_hidden = None

    @torch.inference_mode()
    def rollback(self, keep):
        super().rollback(keep)
        self._rows.cut(self.length)


class FeatureTreeShape:
    """What every feature draft's tree proposer shares: its levels (decode/proposers/tree.py's `tree_levels`), its depth, and
    the feature-keeping tree verifier it brings."""

    def _set_levels(self, branching, depth, width, top_k) -> None:
        self.levels = tree_levels(branching, depth, width, top_k)

    def make_verifier(self, target) -> FeatureTreeVerifier:
        self.verifier = FeatureTreeVerifier(target, getattr(self.draft, "aux_layers", None))
        return self.verifier

    @property
    def depth(self) -> int:
        return len(self.levels)


class MedusaTreeProposer(FeatureTreeShape, _FeatureProposer):
    """Medusa heads as a token tree: depth k holds head k's candidates for the token k after the pending one, under
    every node of depth k-1 (the heads read one feature, so the candidates are the same under each parent). Static:
    `branching` (head k's top branching[k-1] under every node, as Medusa's trees); dynamic: `depth` levels of the
    `width` paths with the highest product of head probabilities among each node's `top_k` children."""

    def __init__(self, draft, branching: list[int] | None = None, depth: int | None = None, width: int | None = None,
                 top_k: int = 4):
        super().__init__(draft)
        self._set_levels(branching, depth, width, top_k)
        if len(self.levels) > draft.num_heads:
            raise ValueError(f"A Medusa tree is at most as deep as the draft's heads: {len(self.levels)} levels asked, "
                             f"this draft has {draft.num_heads} heads. Fix: tree.branching with at most "
                             f"{draft.num_heads} entries (static) or tree.depth={draft.num_heads} (dynamic).")

    @torch.inference_mode()
    def propose(self, tokens, gamma, params, generator):
        levels, features = self.levels[:gamma], self._features()
        if not levels or len(features) < len(tokens) - 1 or len(tokens) < 2:
            return [], torch.empty(0)
        feature = features[len(tokens) - 2][None].to(self.draft.device, next(self.draft.parameters()).dtype)
        head = self.draft.get_output_embeddings()
        nodes, parents, scores = [tokens[-1]], [-1], torch.zeros(1)
        for (per_node, width), state in zip(levels, self.draft.head_states(feature, len(levels))):
            logp = torch.log_softmax(head(state)[0].float(), -1)
            picks = choose_children(scores, logp.expand(len(scores), -1), per_node, width)
            frontier = len(nodes) - len(scores)  # the last level's nodes are the last ones added
            parents += [frontier + r for r, _, _ in picks]
            nodes += [t for _, t, _ in picks]
            scores = torch.tensor([sc for _, _, sc in picks])
        return TreeDraft(nodes, parents), torch.empty(0)


def draft_proposer(draft, confidence_threshold: float = 0.0, stop_rule=None):
    """The chain proposer for any draft: a feature draft's own, else DraftModelProposer."""
    if not is_feature_draft(draft):
        return DraftModelProposer(draft, confidence_threshold, stop_rule)
    if stop_rule is not None:
        raise ValueError("Predicted gamma (proposers=[predicted]) is built for standalone drafts, not for "
                         f"{draft.draft_kind} drafts. Fix: proposers=[draft].")
    return (EagleProposer if kind_of_draft(draft).autoregressive else MedusaProposer)(draft, confidence_threshold)


def build(request):
    """proposers=[draft] (decode/proposers/registry.py): the draft's own chain, whatever its kind."""
    return draft_proposer(request.draft, request.threshold)
