"""The EAGLE-style draft's token trees (decode/proposers/eagle_tree.py): every node's children are what a chain along its path
would draft, greedy output is the target's own, the kept features and the draft's cache stay right."""

import pytest
import torch
from transformers import DynamicCache

from decode.proposers.eagle_tree import EagleTreeProposer, slot_mask
from decode.drafts.feature_drafts import EagleDraft, final_hidden
from decode.core.speculative import SamplingParams, generate
from decode.core.trees import path_to
from test_feature_drafts import VOCAB, target, trained_like  # noqa: F401 (target: the tiny target fixture)


@torch.no_grad()
def chain_logits(draft, features, tokens, path_tokens):
    """The draft's logits after drafting `path_tokens` as a chain from scratch (a fresh cache over the true slots)."""
    m = len(tokens) - 1
    cache = DynamicCache(config=draft.layer_config)
    predicted = draft(features[None, :m], torch.tensor([tokens[1:]]), torch.arange(m)[None], cache=cache)[:, -1:]
    for i, token in enumerate(path_tokens):
        predicted = draft(predicted, torch.tensor([[token]]), torch.tensor([[m + i]]), cache=cache)
    return draft.logits(predicted[0, -1])


def test_slot_mask_sees_the_true_slots_and_the_ancestors_slots_only():
    parents = [-1, 0, 0, 1, 2, 3]  # root; two children; one grandchild under each; a great-grandchild under node 3
    allowed = slot_mask(parents, past=4, rows=slice(3, 5))  # feeding nodes 3 and 4 after nodes 1, 2
    assert allowed.shape == (2, 4 + 4)
    assert allowed[:, :4].all()  # every true slot
    assert allowed[0, 4:].tolist() == [True, False, True, False]  # node 3: its parent (node 1) and itself
    assert allowed[1, 4:].tolist() == [False, True, False, True]  # node 4: node 2 and itself


@pytest.mark.parametrize("shape", [{"branching": [2, 2, 1]}, {"depth": 3, "width": 3, "top_k": 3}])
def test_each_nodes_children_are_what_a_chain_along_its_path_drafts(target, shape):
    draft = trained_like(EagleDraft.from_target(target))
    prompt = [5, 9, 11, 7, 20, 3]
    proposer = EagleTreeProposer(draft, **shape)
    verifier = proposer.make_verifier(target)
    verifier.start(prompt)
    proposer.start(prompt)
    tree, _ = proposer.propose(prompt, proposer.depth, SamplingParams(0.0), None)
    assert proposer.cache.get_seq_length() == len(prompt) - 1  # the guessed slots left the draft's cache
    features = final_hidden(target, torch.tensor([prompt]))[0]
    children = {}
    for i in range(1, len(tree.parents)):
        children.setdefault(tree.parents[i], []).append(i)
    assert children[0]  # the root has children
    for node, kids in children.items():
        path = [tree.tokens[i] for i in path_to(tree.parents, node)[1:]]
        logits = chain_logits(draft, features, prompt, path)
        first = tree.tokens[kids[0]]  # children come most probable first
        assert torch.allclose(logits[first], logits.max(), atol=1e-5)
        if "branching" in shape:  # a static tree: each node's top branching[depth] tokens, in order
            assert [tree.tokens[k] for k in kids] == logits.topk(len(kids)).indices.tolist()


@pytest.mark.parametrize("shape", [{"branching": [2, 2, 1]}, {"depth": 3, "width": 3, "top_k": 3},
                                   {"branching": [VOCAB, 1]}])
def test_greedy_output_is_the_targets_own_and_the_paths_features_are_kept(target, shape):
    """[VOCAB, 1]: every token is a candidate at depth 1, so each step accepts a node, often not the first drafted."""
    draft = trained_like(EagleDraft.from_target(target))
    prompt = [5, 9, 11, 7, 20, 3]
    expected = target.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0, len(prompt):].tolist()
    proposer = EagleTreeProposer(draft, **shape)
    out = generate(target, proposer, prompt, proposer.depth, 24)
    assert out.tokens == expected
    assert all(s.drafted <= proposer.depth for s in out.steps) and sum(s.verified for s in out.steps) > 0
    if shape.get("branching", [0])[0] == VOCAB:
        assert all(s.accepted >= 1 for s in out.steps if s.drafted)
    with torch.no_grad():
        recomputed = final_hidden(target, torch.tensor([prompt + out.tokens]))[0]
    kept = proposer.verifier.features
    assert len(kept) == proposer.verifier.length and torch.allclose(kept, recomputed[: len(kept)], atol=1e-5)
    assert proposer.length <= len(prompt) + len(out.tokens) - 1  # only true slots in the draft's cache

