"""Token trees (decode/tree.py): masks, positions, acceptance, and the target's tree pass and cache compaction."""

import random

import pytest
import torch

from conftest import make_model
from decode.tree import (TreeVerifier, depths, greedy_tree_accept, path_to, static_tree, tree_mask,
                         tree_positions)


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
    logits = verifier.score(tokens, parents)
    for i in range(len(parents)):
        branch = prompt[:-1] + [tokens[j] for j in path_to(parents, i)]
        assert torch.allclose(logits[i], _last_logits(model, branch), atol=1e-4), i
    path = path_to(parents, len(parents) - 1)[1:]  # keep the deepest last node's path
    verifier.keep_path(path)
    kept = prompt + [tokens[j] for j in path]
    assert verifier.length == len(kept) and verifier.cache.get_seq_length() == len(kept)
    # the next tree (a chain of two) on the compacted cache equals fresh passes over the kept tokens
    nxt = [rng.randrange(3, 64), rng.randrange(3, 64)]
    again = verifier.score([nxt[0], nxt[1]], [-1, 0])
    assert torch.allclose(again[0], _last_logits(model, kept + nxt[:1]), atol=1e-4)
    assert torch.allclose(again[1], _last_logits(model, kept + nxt), atol=1e-4)


@pytest.mark.parametrize("branching", [[2, 2], [3, 1, 2]])
def test_greedy_tree_decoding_reproduces_the_targets_greedy_output(branching):
    """Static trees drafted by a draft model, verified in one target pass each: output identical to the target's own
    greedy generate(); every step accepts at most the tree's depth."""
    from decode.tree import StaticTreeDrafter, generate_tree_greedy

    target, draft = make_model(64, layers=2, seed=11, init=0.3), make_model(64, layers=1, seed=12, init=0.3)
    for prompt in ([5, 9, 14, 3, 22], [40, 41]):
        with torch.no_grad():
            ref = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                  do_sample=False, max_new_tokens=12, pad_token_id=0)[0, len(prompt):].tolist()
        out, accepted = generate_tree_greedy(target, StaticTreeDrafter(draft, branching), prompt, 12)
        assert out == ref
        assert all(0 <= a <= len(branching) for a in accepted) and sum(accepted) + len(accepted) >= len(out)
