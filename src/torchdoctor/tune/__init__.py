"""`torchdoctor tune`: measure each suggested knob on the user's own script."""
