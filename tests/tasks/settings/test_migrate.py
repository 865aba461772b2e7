"""The one migration of settings (rlep.tasks.settings.migrate): its rules beside today's models."""

from rlep.tasks.settings.migrate import SOURCE_SETTINGS_BEFORE_KINDS, own_settings, upgrade_source_settings
from rlep.tasks.settings.source import SOURCE_KINDS, problem_source


def test_the_sources_settings_before_kinds_are_each_kinds_own_today():
    """The layout before kinds is written out, not read from today's models; what it keeps of a dump is still
    settings of its kind."""
    assert set(SOURCE_SETTINGS_BEFORE_KINDS) == set(SOURCE_KINDS)
    for kind, names in SOURCE_SETTINGS_BEFORE_KINDS.items():
        assert names <= set(SOURCE_KINDS[kind].model_fields)


def test_a_dump_of_the_one_source_model_keeps_its_kinds_settings():
    dump = {name: value for kind in SOURCE_KINDS.values() for name, value in _defaults(kind).items()}
    dump |= {"source": "data/x.parquet", "split": "test"}
    upgraded = upgrade_source_settings(dump)
    assert upgraded == {"kind": "file", **own_settings(dump, SOURCE_SETTINGS_BEFORE_KINDS["file"])}
    assert problem_source(**dump) == problem_source(source="data/x.parquet", split="test")


def test_own_settings_keeps_the_names_given():
    assert own_settings({"a": 1, "b": 2, "kind": "x"}, {"a", "kind"}) == {"a": 1, "kind": "x"}


def _defaults(kind):
    return {
        name: field.get_default(call_default_factory=True)
        for name, field in kind.model_fields.items()
        if not field.is_required() and name != "kind"
    }
