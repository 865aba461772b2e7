"""The replay strategy interface, and what a design declares it needs from the run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from rlep.data.problem import Problem
from rlep.data.rollout import Group, Rollout


@dataclass(frozen=True)
class ReplayNeeds:
    """What a replay design needs from the run, declared once on its class (see strategies.DESIGNS).

    `pool`: a pool of another run's verified answers (`replay.pool`), read, checked and pinned before the run
    starts. `buffer`: it keeps this run's own rollouts across steps, so their age in policy updates is
    meaningful (a pool's answers have none). `generation_advantages`: the rollouts it replays carry the
    advantages computed in their generation group and are not re-scored. `policy`: it scores stored answers under
    the current policy before replaying them (ExGRPO's lowest-entropy choice); `make_replay` hands it `policy`, a
    function from (prompt token ids, answers' token ids) to each answer's mean token entropy.
    """

    pool: bool = False
    buffer: bool = False
    generation_advantages: bool = False
    policy: bool = False


class FreshPrompts:
    """`plan` of a design that generates for the step's drawn prompts as they are (every design but ExGRPO)."""

    def plan(self, prompts: list[Problem], step: int, group_size: int) -> list[tuple[Problem, int]]:
        return [(p, group_size) for p in prompts]


class ReplayStrategy(Protocol):
    """Decides, per training step, what stored rollouts join the fresh ones; called in three visible lines.

    `plan(prompts, step, G)`, before generation: the step's prompts, each with the number of fresh answers to
    generate for it; every design but ExGRPO returns the drawn prompts with G each (`FreshPrompts`), ExGRPO puts
    replayed prompts in place of some, with G - 1 each (their group's last member comes from its buffer).
    `join(fresh, step)`, once the fresh answers are verified and before advantages: returns the step's groups,
    where a strategy may add members to a fresh group so they share its advantage statistics (RLEP, reuse) or
    put a stored group in a fresh one's place (refill); members it adds without a reward are verified next.
    `mix(groups, step)`, after advantages are known: stores what the strategy keeps and returns the rollouts
    the step trains on (FIFO draws its whole batch from its buffer; prioritized adds drawn rollouts on top of
    the fresh ones). Rollouts it returns from
    earlier steps carry `origin="replay"` and the advantage computed when they were generated (FIFO,
    prioritized) or none, to be computed in the step's group (RLEP, reuse, refill).
    `state_dict` / `load_state_dict` make a run resumable.
    """

    name: ClassVar[str]
    needs: ClassVar[ReplayNeeds]

    def plan(self, prompts: list[Problem], step: int, group_size: int) -> list[tuple[Problem, int]]: ...

    def join(self, fresh: list[Group], step: int) -> list[Group]: ...

    def mix(self, groups: list[Group], step: int) -> list[Rollout]: ...

    def stats(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
