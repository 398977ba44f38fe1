"""Knobs: changes applied at run time for one run only (`torchdoctor run --set KNOB=VALUE`).

`spec` parses and documents them (torch-free, so `tune` and `--help` can use it); `apply`
installs them around the probes inside the user's process.
"""
