"""Token trees (decode/proposers/tree.py): masks, positions, acceptance, and the target's tree pass and cache compaction."""

import random

import pytest
import torch

from conftest import make_model
from decode.core.speculative import generate
from transformers import DynamicCache

from decode.core.trees import (TreeDraft, depths, greedy_tree_accept, path_to, static_tree, tree_mask,
                               tree_positions)
from decode.proposers.tree import TreeProposer, TreeVerifier, choose_children, compact_cache


def random_parents(n: int, rng: random.Random) -> list[int]:
    return [-1] + [rng.randrange(i) for i in range(1, n)]


def test_static_tree_shapes_and_depths():
    assert static_tree([1, 1, 1]) == [-1, 0, 1, 2]  # a chain of three drafted tokens
    parents = static_tree([2, 2])
    assert len(parents) == 1 + 2 + 4 and depths(parents) == [0, 1, 1, 2, 2, 2, 2]
    with pytest.raises(ValueError, match="branching"):
        static_tree([2, 0])
    with pytest.raises(ValueError, match="earlier node"):
        depths([-1, 2, 0])


@pytest.mark.parametrize("seed", range(10))
def test_compaction_keeps_exactly_the_chosen_positions_in_order(seed):
    """compact_cache moves only what follows the untouched prefix; the result equals gathering the kept positions
    (any subset, and the tree case: the whole context, then a few nodes)."""
    rng = random.Random(seed)
    length = rng.randrange(2, 12)
    context = 0 if seed % 2 else rng.randrange(1, length)
    moved = sorted(rng.sample(range(context, length), rng.randrange(0 if context else 1, length - context + 1)))
    keep = list(range(context)) + moved
    cache = DynamicCache()
    layers = [(torch.randn(1, 2, length, 3), torch.randn(1, 2, length, 3)) for _ in range(2)]
    for i, (k, v) in enumerate(layers):
        cache.update(k.clone(), v.clone(), i)
    compact_cache(cache, context, moved)
    for layer, (k, v) in zip(cache.layers, layers):
        assert torch.equal(layer.keys, k[..., keep, :]) and torch.equal(layer.values, v[..., keep, :])
    assert cache.get_seq_length() == len(keep)


@pytest.mark.parametrize("seed", range(20))
def test_mask_is_ancestry_and_positions_are_depths(seed):
    rng = random.Random(seed)
    parents = random_parents(rng.randint(1, 12), rng)
    mask, d = tree_mask(parents), depths(parents)
    for i in range(len(parents)):
        path = path_to(parents, i)
        assert path[0] == 0 and path[-1] == i and len(path) == d[i] + 1
        assert mask[i].nonzero().flatten().tolist() == sorted(path)
    assert tree_positions(parents, 7).tolist() == [7 + x for x in d]


def test_greedy_tree_accept_follows_the_targets_choices():
    #        0 (pending)
    #      /   \
    #    1:a   2:b
    #    |      |
    #   3:c    4:d
    tokens, parents = [9, 10, 11, 12, 13], [-1, 0, 0, 1, 2]
    assert greedy_tree_accept(tokens, parents, [11, 0, 13, 0, 5]) == ([2, 4], 5)  # b then d, bonus 5
    assert greedy_tree_accept(tokens, parents, [10, 7, 0, 0, 0]) == ([1], 7)      # a, then correction 7
    assert greedy_tree_accept(tokens, parents, [3, 0, 0, 0, 0]) == ([], 3)        # nothing accepted


def _last_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float()


@pytest.mark.parametrize("seed", range(2))
def test_one_tree_pass_gives_each_branch_its_own_logits_and_compaction_equals_a_fresh_prefill(seed):
    """The tree mask and positions give every node the logits of a separate pass over its own path; after keeping
    one path, the compacted cache decodes exactly like a fresh prefill of the kept tokens."""
    model = make_model(64, layers=2, seed=seed, init=0.3)
    rng = random.Random(seed)
    prompt = [rng.randrange(3, 64) for _ in range(6)]
    parents = static_tree([2, 2, 1]) if seed == 0 else random_parents(9, rng)
    tokens = [prompt[-1]] + [rng.randrange(3, 64) for _ in parents[1:]]
    verifier = TreeVerifier(model)
    verifier.start(prompt)
    logits = verifier.score(prompt, TreeDraft(tokens, parents))
    for i in range(len(parents)):
        branch = prompt[:-1] + [tokens[j] for j in path_to(parents, i)]
        assert torch.allclose(logits[i], _last_logits(model, branch), atol=1e-4), i
    path = path_to(parents, len(parents) - 1)[1:]  # keep the deepest last node's path
    verifier.keep_path(path)
    kept = prompt + [tokens[j] for j in path]
    assert verifier.length == len(kept) and verifier.cache.get_seq_length() == len(kept)
    # the next tree (a chain of two) on the compacted cache equals fresh passes over the kept tokens
    nxt = [rng.randrange(3, 64), rng.randrange(3, 64)]
    again = verifier.score(kept + nxt[:1], TreeDraft([nxt[0], nxt[1]], [-1, 0]))
    assert torch.allclose(again[0], _last_logits(model, kept + nxt[:1]), atol=1e-4)
    assert torch.allclose(again[1], _last_logits(model, kept + nxt), atol=1e-4)


def test_choose_children_static_and_dynamic():
    logp = torch.log(torch.tensor([[0.6, 0.3, 0.1, 0.0], [0.15, 0.1, 0.05, 0.7]]))
    scores = torch.log(torch.tensor([0.9, 0.1]))
    static = choose_children(scores, logp, 2)
    assert [(r, t) for r, t, _ in static] == [(0, 0), (0, 1), (1, 3), (1, 0)]  # two per node, most likely first
    assert static[0][2] == pytest.approx(float(torch.log(torch.tensor(0.9 * 0.6))))
    dynamic = choose_children(scores, logp, 2, width=3)  # path probabilities .54 .27 .07 .015: the sure node's two win
    assert [(r, t) for r, t, _ in dynamic] == [(0, 0), (0, 1), (1, 3)]


def _reference(target, prompt, n):
    with torch.no_grad():
        return target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                               do_sample=False, max_new_tokens=n, pad_token_id=0)[0, len(prompt):].tolist()


@pytest.mark.parametrize("shape", [{"branching": [2, 2]}, {"branching": [3, 1, 2]},
                                   {"depth": 4, "width": 3, "top_k": 3}])
def test_tree_decoding_through_the_main_loop_is_the_targets_greedy_output(shape):
    """Static and dynamic trees drafted by a draft model, verified in one target pass each by the main loop: output
    identical to the target's own greedy generate(); each step accepts at most the tree's depth, and the step log
    prices the tree (nodes verified, one draft pass per depth)."""
    target, draft = make_model(64, layers=2, seed=11, init=0.3), make_model(64, layers=1, seed=12, init=0.3)
    for prompt in ([5, 9, 14, 3, 22], [40, 41]):
        proposer = TreeProposer(draft, **shape)
        gen = generate(target, proposer, prompt, proposer.depth, 12)
        assert gen.tokens == _reference(target, prompt, 12)
        depth = proposer.depth
        assert all(0 <= s.accepted <= s.drafted <= depth for s in gen.steps)
        assert sum(s.accepted + 1 for s in gen.steps) >= len(gen.tokens)
        full = [s for s in gen.steps if s.drafted == depth]
        assert full and all(s.draft_passes == depth and s.verified >= depth for s in full)
        if "width" in shape:
            assert all(s.verified <= shape["width"] * depth for s in full)
        else:
            assert all(s.verified == len(static_tree(shape["branching"])) - 1 for s in full)


def test_a_draft_equal_to_the_target_accepts_the_whole_depth():
    target = make_model(64, layers=2, seed=11, init=0.3)
    gen = generate(target, TreeProposer(target, branching=[2, 1, 1]), [5, 9, 14], 3, 16)
    assert gen.tokens == _reference(target, [5, 9, 14], 16)
    assert all(s.accepted == s.drafted for s in gen.steps)


def test_a_dynamic_tree_needs_its_sizes():
    draft = make_model(64, layers=1, seed=12, init=0.3)
    with pytest.raises(ValueError, match="dynamic tree"):
        TreeProposer(draft, depth=3, width=0)


def test_replayed_cost_of_a_tree_step():
    from decode.core.metrics import pass_seconds, replayed_speedup
    from decode.core.speculative import StepLog

    passes = [1.0, 1.1, 1.2]
    assert pass_seconds(passes, 5) == pytest.approx(1.4)  # extended linearly past the measured passes
    tree = StepLog(3, 2, 0, 0, verified=6, draft_passes=3)  # 3 tokens out; 3 draft passes + a 7-token pass
    assert replayed_speedup([tree], 0.1, passes) == pytest.approx(3 * 1.0 / (3 * 0.1 + 1.6))
    chain = StepLog(2, 2, 0, 0)
    assert replayed_speedup([chain], 0.1, passes) == pytest.approx(3 / (0.2 + 1.2))


def test_path_ranks_name_each_kept_node_among_its_siblings():
    from decode.core.trees import path_ranks

    parents = static_tree([3, 2])  # root; nodes 1-3 at depth 1; 4-9 at depth 2 (two under each)
    assert path_ranks(parents, [1, 4]) == [0, 0]
    assert path_ranks(parents, [3, 9]) == [2, 1]
    assert path_ranks(parents, [2]) == [1]
    assert path_ranks(parents, []) == []


def test_tree_acceptance_counts_depths_ranks_and_what_the_width_bought():
    from decode.core.metrics import tree_acceptance
    from decode.core.speculative import StepLog

    assert tree_acceptance([StepLog(3, 2, 0, 0)]) is None  # chains only: nothing to say
    steps = [StepLog(3, 3, 0, 0, verified=9, draft_passes=3, ranks=[0, 0, 0]),  # the chain of first choices
             StepLog(3, 2, 0, 0, verified=9, draft_passes=3, ranks=[0, 1]),  # the chain would have kept 1 of 2
             StepLog(3, 0, 0, 0, verified=9, draft_passes=3, ranks=[]),
             StepLog(3, 1, 0, 0, verified=3, draft_passes=3, ranks=[2]),  # the chain would have kept none
             StepLog(2, 2, 0, 0)]  # a chain step among them is left out
    t = tree_acceptance(steps)
    assert t["steps"] == 4 and t["mean_nodes"] == pytest.approx(7.5)
    assert t["reached_depth"] == [0.75, 0.5, 0.25]
    assert t["rank_share"] == pytest.approx([4 / 6, 1 / 6, 1 / 6])
    assert t["beyond_first_choice"] == pytest.approx(2 / 6)


def test_tree_steps_log_the_ranks_of_their_kept_nodes():
    """Through the main loop: every tree step logs one rank per kept token, each within its level's branching; a
    draft equal to the target keeps only first choices."""
    target, draft = make_model(64, layers=2, seed=11, init=0.3), make_model(64, layers=1, seed=12, init=0.3)
    gen = generate(target, TreeProposer(draft, branching=[3, 2]), [5, 9, 14, 3, 22], 2, 16)
    full = [s for s in gen.steps if s.drafted == 2]
    assert full and all(len(s.ranks) == s.accepted and all(0 <= r < k for r, k in zip(s.ranks, [3, 2]))
                        for s in full)
    same = generate(target, TreeProposer(target, branching=[2, 2]), [5, 9, 14], 2, 12)
    assert all(r == 0 for s in same.steps for r in s.ranks or [])


def test_a_tree_step_costs_one_draft_pass_per_level_even_after_a_fully_kept_step():
    """The draft's uncached context (the last token of a fully kept step) goes into the root's pass: one draft pass
    per level, never an extra one."""
    draft = make_model(64, layers=2, seed=11, init=0.3)  # the kept path is set by hand below
    calls = []
    draft.register_forward_hook(lambda *_: calls.append(1))
    proposer = TreeProposer(draft, branching=[2, 1, 1])
    proposer.start([5, 9, 14])
    tokens = [5, 9, 14]
    for _ in range(3):
        calls.clear()
        tree, _ = proposer.propose(tokens, 3, None, None)
        assert len(calls) == 3
        tree.path = [1, 3, 5]  # keep the first-choice branch whole (its deepest node never fed), then a bonus token
        tokens = tokens + [tree.tokens[i] for i in tree.path] + [7]
        proposer.rollback(len(tokens) - 1)


@pytest.mark.parametrize("branching", [[2, 1], [3, 2, 1], [1, 1, 1]])
def test_replayed_tree_steps_are_the_steps_greedy_tree_decoding_takes(branching):
    """decode/core/replay.py replay_tree on the draft's ranks along the target's greedy path gives exactly the
    (depth, kept) of every step of real greedy decoding with a static tree of that shape."""
    from decode.core.replay import draft_ranks, replay_tree

    target, draft = make_model(64, layers=2, seed=11, init=0.3), make_model(64, layers=1, seed=12, init=0.3)
    for prompt in ([5, 9, 14, 3, 22], [40, 41]):
        gen = generate(target, TreeProposer(draft, branching=branching), prompt, len(branching), 20)
        ranks = draft_ranks(draft, [prompt], [gen.tokens])
        assert [(s.drafted, s.accepted) for s in replay_tree(ranks, branching)] == \
            [(s.drafted, s.accepted) for s in gen.steps]
        assert [s.verified for s in replay_tree(ranks, branching) if s.drafted == len(branching)] == \
            [s.verified for s in gen.steps if s.drafted == len(branching)]


def test_tree_shapes_are_bounded_non_increasing_and_include_chains():
    from decode.core.replay import tree_shapes

    shapes = tree_shapes(4, 12)
    assert (1,) in shapes and (1, 1, 1, 1) in shapes and (4,) in shapes and (3, 2) in shapes
    assert all(len(s) <= 4 and list(s) == sorted(s, reverse=True) and len(static_tree(list(s))) - 1 <= 12
               for s in shapes)
    assert len(set(shapes)) == len(shapes)


def test_best_tree_buys_width_only_where_the_drafts_second_choices_are_kept_and_nodes_are_cheap():
    from decode.core.replay import best_tree

    flat = [1.0] * 40  # a pass of any size costs one step
    sure = [[0] * 60]  # the draft's first choice is always the target's: a chain
    assert best_tree(sure, 0.05, flat, 4, 12)["branching"] == [1, 1, 1, 1]
    second = [[1, 0] * 30]  # every other token is the draft's second choice: two children per node keep them all
    pick = best_tree(second, 0.05, flat, 4, 24)
    assert pick["branching"][:2] == [2, 2] and pick["expected_speedup"] > pick["best_chain_expected_speedup"]
    steep = [1.0 + k for k in range(40)]  # every node costs a whole target step: the tree does not pay
    dear = best_tree(second, 0.05, steep, 4, 24)
    assert max(dear["branching"]) == 1 and max(dear["best_branching_tree"]) > 1
    assert dear["best_branching_tree_expected_speedup"] < dear["expected_speedup"]
    assert dear["top_k_hits"] == [0.5, 1.0, 1.0, 1.0]
