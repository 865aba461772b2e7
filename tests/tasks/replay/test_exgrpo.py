"""ExGRPO (`--replay exgrpo`) on hand-built rollouts: bucket weights and sampling, the lowest-entropy choice,
retirement, the group composition and the step's prompt count, the shaped loss, the delayed start, resume."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlep.data.problem import Problem
from rlep.data.rollout import Group, Rollout
from rlep.tasks.engines import Completion
from rlep.tasks.replay import make_replay
from rlep.tasks.replay.exgrpo import ExGRPOReplay, bucket_weights, sample_from_buckets
from rlep.tasks.settings.engine import SamplingConfig
from rlep.tasks.settings.replay import ExGRPOReplayConfig
from rlep.tasks.settings.train import LossConfig, TrainConfig
from rlep.tasks.training.generation.async_gen import generate_counts
from rlep.tasks.training.maths.advantages import fill_advantages
from rlep.tasks.training.maths.batch import build_batch
from rlep.tasks.training.maths.logprobs import mean_completion_entropy, token_logprobs
from rlep.tasks.training.maths.losses import PolicyShaping, clipped_policy_loss

K = 4


def problem(pid):
    return Problem(id=pid, problem=f"Q {pid}", answer="1", data_source="d")


def rollout(pid, step, correct, tokens=None, i=0):
    tokens = tokens or [10 + step, 20 + i]
    return Rollout(
        problem_id=pid,
        data_source="d",
        prompt=f"Q {pid}",
        gold_answer="1",
        response=f"{pid}@{step}#{i}",
        response_token_ids=list(tokens),
        policy_version=step - 1,
        prompt_token_ids=[9],
        behaviour_logprobs=[-0.5] * len(tokens),
        reward=float(correct),
        correct=correct,
        sample_index=i,
    )


def group(pid, step, corrects):
    return Group(pid, [rollout(pid, step, c, i=i) for i, c in enumerate(corrects)])


def token_mean(prompt, answers):
    """A stand-in for the policy's mean entropy: each answer's mean token id."""
    return [sum(a) / len(a) for a in answers]


def exgrpo(policy=token_mean, **settings):
    return ExGRPOReplay(ExGRPOReplayConfig(**{"start_accuracy": 0, **settings}), seed=0, policy=policy)


def step_through(replay, step, results, prompts=None):
    """One step: plan the drawn `prompts` (default: those of `results`), generate each planned prompt's answers
    with the correctness `results[pid]` gives (its first len(...) entries), join, advantages, mix."""
    drawn = [problem(pid) for pid in (prompts or results)]
    planned = replay.plan(drawn, step, K)
    fresh = [group(p.id, step, results[p.id][:n]) for p, n in planned]
    groups = replay.join(fresh, step)
    fill_advantages(groups, LossConfig(scale_advantages_by_std=False))
    replay.mix(groups, step)
    return planned, groups


# ---------------------------------------------------------------- bucket weights and sampling


def test_bucket_weights_are_the_released_codes_gaussian_in_successes():
    # K = 8: exp(-(k - 4)^2 / 2) for k = 1..7 is 0.0111, 0.1353, 0.6065, 1, 0.6065, 0.1353, 0.0111 (sum 2.5060).
    raw = [math.exp(-4.5), math.exp(-2), math.exp(-0.5), 1.0, math.exp(-0.5), math.exp(-2), math.exp(-4.5)]
    assert bucket_weights([1, 2, 3, 4, 5, 6, 7], 8) == pytest.approx([w / sum(raw) for w in raw])
    assert bucket_weights([1, 2, 3, 4, 5, 6, 7], 8)[3] == pytest.approx(0.39905, abs=1e-5)
    # Only the nonempty buckets share the mass: k = 2 and 4 of K = 8 -> 0.1353 / 1.1353 and 1 / 1.1353.
    assert bucket_weights([2, 4], 8) == pytest.approx([0.119203, 0.880797], abs=1e-6)
    # Table 3's hard-biased mu = 0.25: the peak moves to k = 2.
    assert bucket_weights([2, 4], 8, mean=0.25) == pytest.approx([0.880797, 0.119203], abs=1e-6)


def test_bucket_sampling_draws_distinct_prompts_at_the_hand_computed_rate():
    # Buckets k=2: [a], k=4: [b, c, d] with probs 0.1192 / 0.8808 and n = 2. `a` is drawn iff the multinomial
    # puts at least one draw on k=2 (a second one is cut to the bucket's size and redrawn from k=4):
    # P = 1 - 0.8808^2 = 0.2242; b, c, d share the rest: (2 - 0.2242) / 3 = 0.5919 each.
    buckets = {2: ["a"], 4: ["b", "c", "d"]}
    probs = bucket_weights([2, 4], 8)
    rng = np.random.default_rng(0)
    draws = [sample_from_buckets(buckets, 2, probs, rng) for _ in range(6000)]
    assert all(len(d) == 2 == len(set(d)) for d in draws)
    share = {x: np.mean([x in d for d in draws]) for x in "abcd"}
    assert share["a"] == pytest.approx(1 - 0.880797**2, abs=0.02)
    assert all(share[x] == pytest.approx((2 - 0.224197) / 3, abs=0.025) for x in "bcd")
    assert sorted(sample_from_buckets(buckets, 9, probs, rng)) == ["a", "b", "c", "d"]  # asks more than there is


# ---------------------------------------------------------------- the plan: group composition, prompt count


def test_replayed_prompts_take_the_place_of_drawn_ones_with_k_minus_1_fresh_answers():
    replay = exgrpo(replay_ratio=0.5)
    step_through(replay, 1, {"a": [1, 0, 0, 0], "b": [1, 1, 0, 0], "c": [1, 0, 0, 0]})  # all three stored
    assert replay.stats()["buffer_prompts"] == 3
    drawn = [problem(p) for p in ("w", "x", "y", "z", "v")]
    planned = replay.plan(drawn, 2, K)
    # floor(0.5 x 5) = 2 replayed prompts, in place of the last 2 drawn: the step keeps 5 prompts.
    assert len(planned) == 5 and [p.id for p, _ in planned[:3]] == ["w", "x", "y"]
    assert [n for _, n in planned] == [K, K, K, K - 1, K - 1]
    replayed_ids = [p.id for p, _ in planned[3:]]
    assert len(set(replayed_ids)) == 2 and set(replayed_ids) <= {"a", "b", "c"}
    fresh = [group(p.id, 2, [0] * n) for p, n in planned]
    groups = replay.join(fresh, 2)
    for g in groups[3:]:  # 1 stored + K - 1 fresh, one group of K
        assert [r.origin for r in g.rollouts] == ["fresh"] * (K - 1) + ["replay"]
        stored = g.rollouts[-1]
        assert stored.shaping == 0.1 and stored.policy_version == 0 and stored.reward == 1.0
        assert stored.behaviour_logprobs == [-0.5, -0.5] and stored.advantage is None
    assert all(len(g.rollouts) == K and all(r.shaping is None for r in g.rollouts) for g in groups[:3])
    # The advantage's baseline is the group mean including the replayed member: rewards [0, 0, 0, 1] -> 1/4.
    fill_advantages(groups, LossConfig(scale_advantages_by_std=False))
    assert [r.advantage for r in groups[3].rollouts] == pytest.approx([-0.25, -0.25, -0.25, 0.75])


def test_only_the_stored_member_of_a_replayed_group_trains_with_shaping():
    # o* trains with policy shaping; the K - 1 fresh answers of its group keep the run's objective, in the group
    # and in the batch the update reads (`shaping` per row: beta for o*, 0 for the rest).
    replay = exgrpo(replay_ratio=1.0)
    step_through(replay, 1, {"a": [1, 0, 0, 0]})
    planned = replay.plan([problem("a")], 2, K)
    (joined,) = replay.join([group(p.id, 2, [0] * n) for p, n in planned], 2)
    assert [(r.origin, r.shaping) for r in joined.rollouts] == [("fresh", None)] * (K - 1) + [("replay", 0.1)]
    fill_advantages([joined], LossConfig())
    assert build_batch(joined.rollouts, 0, 2).shaping.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.1])


def test_the_replayed_count_is_bounded_by_the_buffer_and_rho():
    replay = exgrpo(replay_ratio=0.75)
    step_through(replay, 1, {"a": [1, 0, 0, 0]})
    assert [n for _, n in replay.plan([problem(p) for p in "wxyz"], 2, K)] == [K, K, K, K - 1]  # 1 stored prompt
    replay = exgrpo(replay_ratio=0.75)
    step_through(replay, 1, {p: [1, 0, 0, 0] for p in "abcdef"})
    assert [n for _, n in replay.plan([problem(p) for p in "wxyz"], 2, K)] == [K, K - 1, K - 1, K - 1]  # floor(3)


def test_generation_makes_k_minus_1_answers_for_replayed_prompts_in_a_call_of_their_own():
    calls = []

    class Engine:
        def generate(self, prompts, sampling, progress=False):
            calls.append((list(prompts), sampling.n, sampling.seed))
            return [[Completion(f"{p}{i}", [i], [0.0], "stop") for i in range(sampling.n)] for p in prompts]

    sampling = SamplingConfig(n=K, seed=7)
    out = generate_counts(Engine(), ["w", "a", "x", "b"], [K, K - 1, K, K - 1], sampling)
    assert [len(c) for c in out] == [K, K - 1, K, K - 1] and out[1][0].text == "a0"  # prompt order kept
    assert calls == [(["w", "x"], K, 7), (["a", "b"], K - 1, 7 + (1 << 31))]  # the first call as before
    calls.clear()
    generate_counts(Engine(), ["w", "x"], [K, K], sampling)
    assert calls == [(["w", "x"], K, 7)]  # a design that plans nothing: one call, unchanged


# ---------------------------------------------------------------- retirement


def test_a_fully_solved_prompt_is_retired_from_step_1_and_never_stored_again():
    replay = exgrpo(start_accuracy=0.99)  # replay never on: retirement acts anyway
    step_through(replay, 1, {"a": [1, 1, 1, 1], "b": [1, 0, 0, 0]})
    assert replay.retired == {("d", "a")} and replay.buffer == {}  # b not stored: collection waits for the start
    replay = exgrpo()
    step_through(replay, 1, {"a": [1, 0, 0, 0], "b": [1, 1, 0, 0]})
    assert set(replay.buffer) == {("d", "a"), ("d", "b")}
    step_through(replay, 2, {"a": [1, 1, 1, 1], "b": [0] * 4, "x": [0] * 4}, prompts=["a", "x"])  # a: K of K
    assert ("d", "a") in replay.retired and ("d", "a") not in replay.buffer  # out of the buffer, for good
    step_through(replay, 3, {"a": [1, 0, 0, 0], "b": [0] * 4, "x": [0] * 4}, prompts=["a", "x"])
    assert ("d", "a") not in replay.buffer and replay.stats()["retired_prompts"] == 1


def test_a_replayed_group_counts_its_stored_member_toward_bucket_and_retirement():
    replay = exgrpo(replay_ratio=1.0)
    step_through(replay, 1, {"a": [1, 0, 0, 0]})
    assert replay.buffer[("d", "a")].successes == 1
    planned, groups = step_through(replay, 2, {"a": [1, 1, 0]})  # replayed: 3 fresh + the stored success
    assert [n for _, n in planned] == [K - 1]
    assert replay.buffer[("d", "a")].successes == 3  # 2 fresh + o*
    step_through(replay, 3, {"a": [1, 1, 1]})  # 3 fresh right + o*: K of K
    assert ("d", "a") in replay.retired and not replay.buffer
    # A group with no success leaves the prompt's bucket as it was (the code's).
    replay = exgrpo(replay_ratio=0.0)
    step_through(replay, 1, {"a": [1, 1, 0, 0]})
    step_through(replay, 2, {"a": [0, 0, 0, 0]})
    assert replay.buffer[("d", "a")].successes == 2


# ---------------------------------------------------------------- the lowest-entropy choice


class TableModel(torch.nn.Module):
    """Logits that depend on the current token only: token 1 -> uniform over 8 (entropy log 8), any other ->
    one token far ahead (entropy ~ 0)."""

    def __init__(self):
        super().__init__()
        table = torch.zeros(8, 8)
        table[[0, 2, 3, 4, 5, 6, 7], 0] = 50.0
        self.table = torch.nn.Parameter(table)

    def forward(self, input_ids, attention_mask):
        return SimpleNamespace(logits=self.table[input_ids])


def test_mean_completion_entropy_is_the_mean_over_the_answers_tokens():
    model, prompt, answers = TableModel(), [3], [[1, 1], [1, 1, 2, 2, 2, 2, 2, 2, 2, 2]]
    # Positions predicting the answer: the prompt's last token, then each answer token but the last.
    # [1, 1]: entropies (0, log 8) -> mean log 8 / 2. The long one: (0, log 8, log 8, 0 x 7) -> 2 log 8 / 10.
    log8 = math.log(8)
    assert mean_completion_entropy(model, prompt, answers, 0) == pytest.approx([log8 / 2, log8 / 5], abs=1e-5)
    _, entropy = token_logprobs(model, torch.tensor([[3, 1, 1]]), torch.ones(1, 3, dtype=torch.long))
    assert entropy[0].tolist() == pytest.approx([0.0, log8], abs=1e-5)


def test_the_stored_answer_of_lowest_mean_entropy_is_replayed():
    # Candidate short = [1, 1]: mean entropy log 8 / 2, total log 8. Candidate long: mean log 8 / 5 (lower), total
    # 2 log 8 (higher). Lowest mean picks long; highest mean (or lowest total) would pick short.
    model = TableModel()
    replay = exgrpo(policy=lambda prompt, answers: mean_completion_entropy(model, prompt, answers, 0), replay_ratio=1)
    short, long = [1, 1], [1, 1, 2, 2, 2, 2, 2, 2, 2, 2]
    planned = replay.plan([problem("a")], 1, K)
    fresh = [
        Group("a", [rollout("a", 1, True, short, 0), rollout("a", 1, True, long, 1)] + [rollout("a", 1, False)] * 2)
    ]
    for r in fresh[0].rollouts:
        r.prompt_token_ids = [3]
    replay.mix(replay.join(fresh, 1), 1)
    assert len(replay.buffer[("d", "a")].trajectories) == 2 and planned == [(problem("a"), K)]
    replay.plan([problem("a")], 2, K)
    fresh = [Group("a", [rollout("a", 2, False, i=i) for i in range(K - 1)])]
    for r in fresh[0].rollouts:
        r.prompt_token_ids = [3]
    (joined,) = replay.join(fresh, 2)
    assert joined.rollouts[-1].response_token_ids == long
    stats = replay.stats()
    assert stats["candidates_mean"] == 2 and stats["chosen_entropy_mean"] == pytest.approx(math.log(8) / 5, abs=1e-5)


# ---------------------------------------------------------------- the shaped loss


def test_the_replayed_rows_loss_is_the_hand_computed_policy_shaping():
    # Row 0 shaped (beta 0.1), w = pi / mu = 2 (log-ratio ln 2), A = 2: loss -A w / (w + 0.1) = -4 / 2.1, unclipped
    # although w is far beyond the clip; d loss / d logp = -A 0.1 w / (w + 0.1)^2 = -0.4 / 4.41.
    # Row 1 keeps PPO-clip: ratio exp(0) = 1, A = -1 -> loss 1, gradient 1 (token-mean over 2 tokens: / 2).
    logp = torch.tensor([[math.log(0.5)], [math.log(0.3)]], requires_grad=True)
    old = torch.tensor([[math.log(0.5)], [math.log(0.3)]])
    behaviour = torch.tensor([[math.log(0.25)], [0.0]])
    shaping = PolicyShaping(beta=torch.tensor([0.1, 0.0]), behaviour_logp=behaviour)
    loss, metrics = clipped_policy_loss(
        logp, old, torch.tensor([2.0, -1.0]), torch.ones(2, 1), clip_high=0.28, shaping=shaping
    )
    assert loss.item() == pytest.approx((-4 / 2.1 + 1.0) / 2, abs=1e-6)
    loss.backward()
    assert logp.grad[:, 0].tolist() == pytest.approx([-0.4 / 4.41 / 2, 1.0 / 2], abs=1e-6)
    assert metrics["shaped_token_frac"] == 0.5 and metrics["shaped_ratio_mean"] == pytest.approx(2.0)
    # No shaping given: the same rows under the clip alone (the shaped row's ratio 1 -> loss -2).
    plain, _ = clipped_policy_loss(logp.detach(), old, torch.tensor([2.0, -1.0]), torch.ones(2, 1))
    assert plain.item() == pytest.approx((-2.0 + 1.0) / 2)


# ---------------------------------------------------------------- the delayed start


def test_replay_switches_on_after_the_first_batch_over_the_threshold():
    replay = exgrpo(start_accuracy=0.35)
    step_through(replay, 1, {"a": [1, 0, 0, 0], "b": [0, 0, 0, 0]})  # Pass@1 1/8: off
    assert replay.active_from is None and replay.stats()["active"] == 0.0
    step_through(replay, 2, {"a": [1, 1, 0, 0], "b": [1, 0, 0, 0]})  # 3/8 = 0.375 > 0.35: on from step 3
    assert replay.active_from == 3 and replay.buffer == {}  # step 2 itself collects nothing
    planned, _ = step_through(replay, 3, {"a": [1, 0, 0, 0], "b": [1, 1, 0, 0]})
    assert [n for _, n in planned] == [K, K] and replay.stats()["active"] == 1.0  # empty buffer: nothing replayed
    assert replay.stats()["buffer_size"] == 3 and replay.stats()["bucket_1"] == 1 and replay.stats()["bucket_2"] == 1
    planned, _ = step_through(replay, 4, {"a": [0, 0, 0, 0], "b": [0, 0, 0]})
    assert [n for _, n in planned] == [K, K - 1]  # now it replays
    assert exgrpo(start_accuracy=0).active(1)  # 0: on from step 1


def test_a_batch_pass_at_1_equal_to_the_threshold_does_not_switch_replay_on():
    # The start needs Pass@1 *above* the threshold (the paper's "exceeds"): 1/4 = 0.25 exactly stays off.
    replay = exgrpo(start_accuracy=0.25)
    step_through(replay, 1, {"a": [1, 0, 0, 0]})
    assert replay.active_from is None
    step_through(replay, 2, {"a": [1, 1, 0, 0]})  # 1/2 > 1/4: on from step 3
    assert replay.active_from == 3


# ---------------------------------------------------------------- bound, resume, config


def test_the_optional_bound_drops_the_oldest_stored_first():
    replay = exgrpo(buffer_trajectories=3, replay_ratio=0.0)
    step_through(replay, 1, {"a": [1, 1, 0, 0]})
    step_through(replay, 2, {"b": [1, 1, 0, 0]})
    kept = [(key, s.stored_at) for key, e in replay.buffer.items() for s in e.trajectories]
    assert kept == [(("d", "a"), 1), (("d", "b"), 2), (("d", "b"), 2)]
    assert exgrpo().config.buffer_trajectories is None  # unbounded unless asked


def test_resume_continues_with_the_same_draws_and_choices():
    def history(replay):
        step_through(replay, 1, {p: [1, 1, 0, 0] if p < "d" else [1, 0, 0, 0] for p in "abcdef"})

    def next_steps(replay):
        out = []
        for step in (2, 3):
            planned, groups = step_through(replay, step, {p: [1, 0, 0, 0] for p in "abcdefwxyz"}, prompts=list("wxyz"))
            out.append(([(p.id, n) for p, n in planned], [r.response for g in groups for r in g.rollouts]))
        return out, replay.stats()

    a = ExGRPOReplay(ExGRPOReplayConfig(start_accuracy=0), seed=5, policy=token_mean)
    history(a)
    b = ExGRPOReplay(ExGRPOReplayConfig(start_accuracy=0.9), seed=99, policy=token_mean)
    b.load_state_dict(a.state_dict())
    c = ExGRPOReplay(
        ExGRPOReplayConfig(start_accuracy=0), seed=99, policy=token_mean
    )  # the same history, without the state
    history(c)
    assert next_steps(a) == next_steps(b)
    assert next_steps(c)[0] != next_steps(a)[0]


def test_exgrpo_is_built_with_the_policy_and_refuses_async():
    policy = lambda prompt, answers: [0.0] * len(answers)  # noqa: E731
    replay = make_replay(ExGRPOReplayConfig(), seed=0, policy=policy)
    assert isinstance(replay, ExGRPOReplay) and replay.policy is policy
    assert TrainConfig.model_validate({"replay": {"kind": "exgrpo"}}).replay.replay_ratio == 0.5
    with pytest.raises(ValueError, match="needs mode sync"):
        TrainConfig.model_validate({"replay": {"kind": "exgrpo"}, "mode": "async"})
