"""The commands of `rlep`, grouped by what they act on; `rlep.flows.cli` builds the parser from them and runs one.

Each module holds its commands' parsers (an `add_*` function per command or group; the flags are the fields of
settings models, made by `flows.options.add_model_flags`) beside their bodies, which turn parsed arguments into
validated settings, run the stage and print what it did: `sources` (problems, tiny-model,
real-model), `pools` (collect, inspect, pool), `training` (train, eval), `studies` (pipeline, study), `serving`
(serve, ui), `benches` (bench ...); `common` is what they share.
"""
