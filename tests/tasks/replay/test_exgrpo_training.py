"""ExGRPO through the real loop on the fixture model (vLLM engine, verifier, update): it switches on, stores,
replays K - 1 fresh + 1 stored per replayed prompt within the step's prompt count, and the stored rows train
with policy shaping, as the metrics show.

The fixture model is almost never right, so the engine is made right on purpose: the first answer to every
prompt is the gold answer, boxed, in one of two wordings taken in turn (so a prompt gathers distinct stored
answers to choose among), with its log-probs under the trainer's policy (the policy that generates the step).
Everything else is the real code. With 4 answers a prompt the first step's Pass@1 is 1/4 > 0.2.
"""

import pyarrow.parquet as pq
import pytest

from rlep.data.problem import render_prompt
from rlep.tasks.engines import Completion
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.loop.steps import Trainer
from rlep.tasks.training.maths.logprobs import completion_logprobs

PROMPTS, G = 4, 4


class GoldFirst:
    """The trainer's engine, with the first completion of each prompt replaced by a right answer."""

    def __init__(self, trainer):
        self.trainer, self.engine, self.calls = trainer, trainer.feed.engine, 0
        self.gold = {render_prompt(p, trainer.config.prompt_template, trainer.chat): p.answer for p in trainer.problems}

    def generate(self, prompts, sampling, progress=False):
        out = self.engine.generate(prompts, sampling, progress)
        tokenizer = self.trainer.tokenizer
        for prompt, completions in zip(prompts, out):
            self.calls += 1
            text = ("\\boxed{%s}" if self.calls % 2 else "so \\boxed{%s}") % self.gold[prompt]
            ids = tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
            prompt_ids = completions[0].prompt_token_ids
            (logprobs,) = completion_logprobs(self.trainer.backend.model, [prompt_ids], [ids], tokenizer.pad_token_id)
            completions[0] = Completion(text, ids, logprobs, "stop", prompt_ids)
        return out

    def load_weights(self, state_dict):
        self.engine.load_weights(state_dict)

    def close(self):
        self.engine.close()


@pytest.mark.slow
def test_exgrpo_switches_on_and_replays_one_stored_answer_per_replayed_prompt(fixture_model, tmp_path):
    config = TrainConfig.model_validate(
        dict(
            model=fixture_model,
            out=str(tmp_path / "run"),
            steps=5,
            prompts_per_step=PROMPTS,
            samples_per_prompt=G,
            mini_batch_prompts=2,
            sampling={"max_tokens": 12},
            eval_every=0,
            save_every=0,
            problems={"source": "tiny-math", "split": "train", "limit": 4},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 4},
            engine={"backend": "vllm", "max_num_seqs": 64},
            replay={"kind": "exgrpo", "start_accuracy": 0.2},
            optimizer={"lr": 1e-3},
        )
    )
    trainer = Trainer(config, progress=False)
    trainer.feed.engine = GoldFirst(trainer)
    try:
        result = trainer.run()
    finally:
        trainer.close()
    metrics = pq.read_table(result.metrics_path).to_pandas().set_index("step")
    written = pq.read_table(tmp_path / "run" / "fresh").to_pandas()
    assert metrics.replay_active.tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]  # Pass@1 1/4 > 0.2 at step 1: on from 2
    assert metrics.loc[1, "replay_buffer_size"] == 0 and metrics.loc[2, "replay_buffer_size"] > 0  # stored from 2
    replaying = metrics.loc[3:]
    assert (replaying.replay_rows == PROMPTS // 2).all()  # floor(0.5 x 4) replayed prompts, one stored row each
    assert (metrics.batch_size == PROMPTS * G).all()  # the step's prompt count and group size are kept
    fresh_per_step = written[written.origin == "fresh"].groupby("policy_version").size()
    assert fresh_per_step.tolist() == [16, 16, 14, 14, 14]  # from step 3: 2 x 4 + 2 x (4 - 1) answers generated
    assert (replaying.shaped_token_frac > 0).all() and (metrics.loc[:2].shaped_token_frac.isna()).all()
    assert (replaying.replay_age_mean >= 1).all() and (replaying.replay_accuracy == 1.0).all()
    assert replaying.replay_candidates_mean.max() >= 2  # the entropy forward chose among stored answers
    assert (written.origin == "replay").sum() == metrics.replay_rows.sum()
