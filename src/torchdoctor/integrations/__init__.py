"""Ways into torchdoctor from inside a framework's training loop, without changing the command
line: `integrations.lightning.DoctorCallback` for a Lightning `Trainer`, and
`integrations.transformers.DoctorCallback` for a Hugging Face `transformers.Trainer`. Each
imports its framework only when it is imported; both measure through `common.FrameworkRun`,
the same probes and after-the-run path as `torchdoctor run` and `torchdoctor.watch()`.
"""
