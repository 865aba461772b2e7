"""Every settings model of rlep: what a user writes in a YAML, as command-line flags or in a Prefect form, and
what a run saves of them. One module per unit, each importable without torch, numpy or pyarrow (the CLI's flags,
the Prefect forms and the executor's reuse check read them; tests/tasks/settings/test_import_light.py checks it):

- `collect`, `train`, `evaluate`, `pipeline`, `study`, `recollect`: the settings of each command;
- their sections: `source` (problem sources), `engine` (generation engine and sampling), `replay`, `backend`
  (training processes, LoRA), `perturb` (the chance control and the sampling seeds), `verifier`, `reward`,
  `prompt_length`, `runner` (where a study's runs execute), `tracker`;
- the other commands' settings: `serve` (`rlep serve`, `rlep ui`), `inspect`, `pools` (`rlep pool export` and
  `import`), `bench` (`rlep bench verify`), `models` (`rlep tiny-model`, `rlep real-model`);
- `migrate`: the one migration of settings written in an earlier layout (every layout change, oldest first);
- `layering`: how settings are merged (`--config` + flags, a study's arms over its base) and a bad one reported;
  `sections` finds a model's sections for both;
- `digest`: a versioned digest of resolved settings, which decides whether a finished run can be reused;
- `strict`: what every settings model refuses (a setting it does not have, a number that is not finite).

The package's `__init__` imports nothing: `from rlep.tasks.settings.train import TrainConfig` loads that model's
modules only.
"""
