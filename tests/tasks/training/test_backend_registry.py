"""Backends by kind (tasks/training/backends/registry.py): the loop's build and the trainer's launch read one table,
so a backend written outside the package, registered in a test, trains a run through `train()` unchanged."""

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.backends import registry
from rlep.tasks.training.backends.precision import PrecisionChoice
from rlep.tasks.training.backends.registry import BACKENDS, BackendKind, kind_name, kind_of, register_backend
from rlep.tasks.training.maths.update import policy_update
from rlep.tasks.training.trainer import train


class ToySGD:
    """A backend of this test alone: the policy in this process, plain SGD, no scheduler of its own choice."""

    rank, world_size = 0, 1
    built: list["ToySGD"] = []

    def __init__(self, spec) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(spec.weights, torch_dtype=torch.float32)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=spec.optimizer.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _: 1.0)
        self.precision = PrecisionChoice("fp32", "fp32", "a toy backend trains in float32", "cpu")
        self.updates = 0
        ToySGD.built.append(self)

    def update(self, batch, settings, *, generator=None, before_micro_batch=None):
        self.updates += 1
        return policy_update(self.model, self.optimizer, self.scheduler, batch, settings, generator=generator)

    def named_weights(self, dtype):
        return ((name, tensor.detach().to(dtype)) for name, tensor in self.model.state_dict().items())

    def save_pretrained(self, directory, weight_dtype=torch.float32):
        self.model.save_pretrained(directory)

    def training_state(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_training_state(self, state):
        self.optimizer.load_state_dict(state["optimizer"])

    def rng_state(self):
        return {}

    def load_rng_state(self, state):
        pass

    def lr(self):
        return self.optimizer.param_groups[0]["lr"]

    def mean_entropies(self, *args):
        raise NotImplementedError("no design of this test asks for entropies")

    def close(self):
        pass


def test_a_backend_registered_in_a_test_trains_a_run_through_train(fixture_model, tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "one-process", BackendKind(build=ToySGD))
    monkeypatch.setattr(ToySGD, "built", [])
    config = TrainConfig.model_validate(
        dict(
            model=fixture_model,
            out=str(tmp_path / "run"),
            steps=2,
            prompts_per_step=2,
            samples_per_prompt=4,
            sampling={"max_tokens": 8},
            eval_every=0,
            save_every=1,
            problems={"source": "tiny-math", "limit": 4},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 2},
            engine={"backend": "transformers"},
            loss={"overlong_buffer": 6},  # answers of different lengths, different rewards: the update moves weights
            optimizer={"lr": 1e-2},
        )
    )
    result = train(config, progress=False)

    (toy,) = ToySGD.built
    assert toy.updates == 2  # one mini-batch a step (2 prompts of 8 a mini-batch), through the toy's update
    assert pq.read_table(config.out / "metrics.parquet").column("step").to_pylist() == [1, 2]
    start = load_file(f"{fixture_model}/model.safetensors")
    final = load_file(str(result.final_checkpoint / "model.safetensors"))
    assert any(not torch.equal(start[name], final[name]) for name in start)


def test_the_launch_reads_the_same_table(monkeypatch, tmp_path):
    """A kind with processes of its own is launched by `train()` through its table entry (none started here)."""
    launched = []
    monkeypatch.setitem(BACKENDS, "ddp", BackendKind(build=ToySGD, launch=lambda config, resume: launched.append(1)))
    # as a command starts: no process group yet (a test before this one in the same process may have left one)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    config = TrainConfig(out=str(tmp_path / "run"), backend={"nproc": 2, "strategy": "ddp"})
    assert kind_name(config.backend) == "ddp"
    train(config)
    assert launched == [1]


def test_kinds_by_settings_and_an_unknown_kind_named(monkeypatch):
    assert kind_name(TrainConfig().backend) == "one-process"
    assert kind_name(TrainConfig(backend={"nproc": 2}).backend) == "fsdp2"
    assert kind_of(TrainConfig().backend).launch is None  # one process: the loop runs where `train` is called
    monkeypatch.setattr(registry, "BACKENDS", {})
    with pytest.raises(ValueError, match="backend kind 'one-process': none registered"):
        kind_of(TrainConfig().backend)
    register_backend("one-process", ToySGD)
    assert kind_of(TrainConfig().backend).build is ToySGD
