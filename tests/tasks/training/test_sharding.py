"""Dealing a mini-batch to ranks by tokens: whole groups, loads near the mean, row counts as even as dealing by
count keeps them (so the ranks run the same number of micro-batches where they did before), the same deal on every
rank."""

import torch

from rlep.tasks.training.backends.sharding import Sharding, deal_by_load
from rlep.tasks.training.maths.batch import micro_batch_rows


def test_heaviest_first_onto_the_least_loaded_rank():
    # Four groups of 4 rows; by count (in turn) rank 0 would get groups 0 and 2 (400 + 300 tokens), rank 1 groups
    # 1 and 3 (100 + 100): 700 against 200. By load: 400 | 300, then group 1 onto rank 1 (400 | 400), then group 3
    # onto rank 0 (the tie goes to the lower rank).
    sizes, loads = [4, 4, 4, 4], [400.0, 100.0, 300.0, 100.0]
    assert deal_by_load(sizes, loads, 2) == [[0, 3], [1, 2]]  # 500 | 400, 8 rows each


def test_a_rank_with_no_room_is_passed_over_so_row_counts_stay_even():
    # Rank 1 is lighter after the first three units, but a third group would give it 12 rows of 16 (room: 8 a rank).
    sizes, loads = [4, 4, 4, 4], [400.0, 300.0, 50.0, 10.0]
    dealt = deal_by_load(sizes, loads, 2)
    assert [sum(sizes[u] for u in units) for units in dealt] == [8, 8]
    assert dealt == [[0, 3], [1, 2]]
    # With no rank that has room, the least-loaded takes it (the micro-batch counts then differ, and the update
    # pads the short rank with a masked micro-batch as it always has).
    assert deal_by_load([5, 5, 5], [10.0, 9.0, 8.0], 2) == [[0], [1, 2]]


def test_every_unit_is_dealt_once_and_the_deal_is_deterministic():
    g = torch.Generator().manual_seed(0)
    sizes = torch.randint(1, 9, (37,), generator=g).tolist()
    loads = (torch.randint(1, 500, (37,), generator=g) * torch.tensor(sizes)).float().tolist()
    for world in (1, 2, 3, 8):
        dealt = deal_by_load(sizes, loads, world)
        assert sorted(u for units in dealt for u in units) == list(range(37))
        assert dealt == deal_by_load(sizes, loads, world)
        mean = sum(loads) / world
        heaviest = max(sum(loads[u] for u in units) for units in dealt)
        assert heaviest <= mean + max(loads)  # greedy: no rank above the mean by more than one unit


def _mini_batch():
    """6 groups of 4 rows, two of them long answers, and two loose rows."""
    group = torch.tensor([g for g in range(6) for _ in range(4)] + [-1, -1])
    lengths = torch.tensor([40 if g in (0, 2) else 10 for g in range(6) for _ in range(4)] + [25, 5])
    return group, lengths


def test_sharding_keeps_groups_whole_and_balances_tokens_not_groups():
    group, lengths = _mini_batch()
    ranks = [Sharding(r, 2).rows(group, lengths) for r in range(2)]
    assert sorted(torch.cat(ranks).tolist()) == list(range(len(group)))
    for rows in ranks:  # a group's members all on one rank
        for g in set(group[rows].tolist()) - {-1}:
            assert set((group == g).nonzero().flatten().tolist()) <= set(rows.tolist())
    tokens = [int(lengths[rows].sum()) for rows in ranks]
    # groups 0 and 2 (160 tokens each) go to different ranks: 160 + 40 + 40 + 25 | 160 + 40 + 40 + 5. Dealt in turn
    # by count, groups 0, 2, 4 and the 25-token loose row went to rank 0: 385 tokens against 125.
    assert tokens == [265, 245]
    assert [len(r) for r in ranks] == [13, 13]


def test_every_rank_runs_as_many_micro_batches():
    group, lengths = _mini_batch()
    for micro in (1, 3, 4, 64):
        counts = {len(micro_batch_rows(Sharding(r, 2).rows(group, lengths), lengths, micro)) for r in range(2)}
        expected = Sharding(0, 2).micro_batches(group, micro, lengths)
        assert max(counts) == expected  # the update pads a rank with fewer to this count (FSDP2 needs it)
    # without lengths every row weighs the same: groups are dealt by rows
    assert [len(Sharding(r, 2).rows(group)) for r in range(2)] == [13, 13]
