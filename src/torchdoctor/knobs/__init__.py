"""Knobs: changes applied at run time for one run only (`torchdoctor run --set KNOB=VALUE`)."""

from torchdoctor.knobs.apply import KnobSet
from torchdoctor.knobs.spec import KNOB_SPECS, knob_help, parse_settings

__all__ = ["KNOB_SPECS", "KnobSet", "knob_help", "parse_settings"]
