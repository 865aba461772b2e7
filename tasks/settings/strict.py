"""What every settings model refuses, whichever command it belongs to: a setting it does not have (a misspelling is
named, not dropped) and a number that is not finite (`--lr nan` would pass no bound in words that say why)."""

from pydantic import ConfigDict

SETTINGS = ConfigDict(extra="forbid", allow_inf_nan=False)
