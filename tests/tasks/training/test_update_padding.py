"""An update that does not pay for padding, and does not wait on the device: micro-batches are cut from rows sorted
by length (the step is unchanged, the padding share it reports falls), and the update's own code reads nothing back
from the device within an optimizer step."""

import copy

import pytest
import torch
from conftest import update_rollout
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM

import rlep.tasks.training.maths.update as update
from rlep.tasks.settings.train import LossConfig
from rlep.tasks.training.maths.batch import build_batch, micro_batch_rows
from rlep.tasks.training.maths.update import UpdateSettings, policy_update


def test_micro_batches_are_cut_longest_first_and_keep_every_row_once():
    lengths = torch.tensor([3, 9, 4, 9, 1, 7, 2])
    rows = torch.tensor([0, 2, 3, 4, 5, 6])  # a rank's or a mini-batch's rows (1 is not among them)
    cut = micro_batch_rows(rows, lengths, 4)
    assert [c.tolist() for c in cut] == [[3, 5, 2, 0], [6, 4]]  # 9, 7, 4, 3 | 2, 1 (ties keep their order)
    assert micro_batch_rows(torch.tensor([], dtype=torch.long), lengths, 4) == []


def _alternating_batch(n=8):
    """Rows alternately long (24 tokens) and short (6): cut in batch order, every micro-batch of 2 pads its short row
    to the long one's width."""
    g = torch.Generator().manual_seed(0)
    rollouts = []
    for i in range(n):
        prompt = torch.randint(3, 40, (4,), generator=g).tolist()
        response = torch.randint(3, 40, (20 if i % 2 == 0 else 2,), generator=g).tolist()
        rollouts.append(update_rollout(i, prompt, response, g))
    return build_batch(rollouts, pad_id=0, step=1)


def _step(model, batch, micro, updates=1, epochs=1, loss=None):
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0)
    settings = UpdateSettings(
        loss or LossConfig(), grad_clip=1e9, ppo_epochs=epochs, updates_per_epoch=updates, micro_batch_size=micro
    )
    metrics = policy_update(model, opt, sched, batch, settings, generator=torch.Generator().manual_seed(1))
    return model, metrics


@pytest.fixture(scope="module")
def base_model(fixture_model):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)


def test_sorted_micro_batches_pad_less_and_make_the_same_step(base_model):
    batch = _alternating_batch()
    whole, m_whole = _step(base_model, batch, micro=None)
    split, m_split = _step(base_model, batch, micro=2)
    # One pass over the whole batch pads every short row to 24 tokens: 4 x 18 of 8 x 24 positions.
    assert m_whole["padding_share"] == pytest.approx(4 * 18 / (8 * 24))
    # Sorted, the micro-batches of 2 are (24, 24) (24, 24) (6, 6) (6, 6): no padding. Cut in batch order, each
    # would be (24, 6): a share of 4 x 18 / (8 x 24) again.
    assert m_split["padding_share"] == 0.0
    for a, b in zip(whole.parameters(), split.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)
    for name in ("loss", "entropy", "ratio_mean", "is_ratio_mean", "logprob_mismatch", "grad_norm"):
        assert m_split[name] == pytest.approx(m_whole[name], rel=1e-4, abs=1e-6), name


def test_sorting_keeps_each_optimizer_steps_rows(base_model, monkeypatch):
    # Two mini-batches of whole groups a step: the rows each optimizer step trains on are mini_batches' own,
    # however they are cut into micro-batches.
    batch = _alternating_batch()
    batch.group = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    expected = [sorted(b.tolist()) for b in update.mini_batches(batch.group, 2, torch.Generator().manual_seed(1))]
    seen, steps = [], []
    add = update._Accumulator.add

    def recording_add(self, part, *args):
        seen.append(part.input_ids.clone())
        return add(self, part, *args)

    monkeypatch.setattr(update._Accumulator, "add", recording_add)
    step = torch.optim.SGD.step

    def recording_step(self, *args, **kwargs):
        steps.append(len(seen))
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", recording_step)
    _step(base_model, batch, micro=1, updates=2)
    rows = {tuple(batch.input_ids[i][batch.attention_mask[i].bool()].tolist()): i for i in range(len(batch))}
    trained = [rows[tuple(ids[0][ids[0] != 0].tolist())] for ids in seen]
    assert [sorted(trained[: steps[0]]), sorted(trained[steps[0] :])] == expected


class _HostReads(TorchDispatchMode):
    """Counts the operations that make the host wait for the device: a scalar read (`.item()`, `bool()`, `int()`)
    and a selection whose size depends on data (boolean-mask indexing, nonzero). `paused` stops the count."""

    def __init__(self):
        super().__init__()
        self.reads, self.paused = [], False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        masked = name.startswith("aten.index.Tensor") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or [])
        )
        if not self.paused and (masked or "_local_scalar_dense" in name or "nonzero" in name):
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("micro", [1, 3])
def test_the_update_reads_the_device_only_once_per_optimizer_step(base_model, monkeypatch, micro):
    """policy_update's own code and its loss (tasks/training/maths/logprobs.py and transformers are not counted) read
    nothing from the device per micro-batch: one read a step."""
    counter = _HostReads()

    def uncounted(fn):
        def call(*args, **kwargs):
            counter.paused = True
            try:
                return fn(*args, **kwargs)
            finally:
                counter.paused = False

        return call

    monkeypatch.setattr(update, "token_logprobs", uncounted(update.token_logprobs))
    reads = []
    to_host = update._Accumulator.to_host

    def counted_to_host(self, grad_norm):
        reads.append(len(counter.reads))
        return to_host(self, grad_norm)

    monkeypatch.setattr(update._Accumulator, "to_host", counted_to_host)
    batch = _alternating_batch(7)
    loss = LossConfig(is_correction="truncate", token_mean_over="fresh")
    with counter:
        _, metrics = _step(base_model, batch, micro=micro, updates=2, epochs=2, loss=loss)
    assert metrics["optimizer_updates"] == 4 == len(reads)
    assert counter.reads == [], counter.reads  # every value is read by to_host's one transfer (.tolist())


def test_no_loss_reads_the_device():
    """Every objective's loss and metrics (the clip's, AsymRE's, M2PO's mask, ExGRPO's shaping) stay on the device:
    the update reads them once a step with the rest (`_Accumulator.to_host`)."""
    from rlep.tasks.training.maths.losses import PolicyShaping, asymre_loss, clipped_policy_loss, m2po_loss

    generator = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=generator)
    old = logp + 0.3 * torch.randn(3, 5, generator=generator)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float32)
    advantages = torch.tensor([1.0, -1.0, 0.5])
    shaping = PolicyShaping(beta=torch.tensor([0.0, 0.1, 0.0]), behaviour_logp=old)
    counter = _HostReads()
    with counter:
        losses = [
            clipped_policy_loss(logp, old, advantages, mask, shaping=shaping),
            asymre_loss(logp, advantages, mask, shaping=shaping),
            m2po_loss(logp, old, advantages, mask, threshold=0.01),
        ]
    assert counter.reads == [], counter.reads
    m2po = losses[2][1]
    assert 0 < float(m2po["m2po_masked_frac"]) < 1 and float(m2po["m2po_m2_kept"]) <= 0.01 < float(m2po["m2po_m2"])
