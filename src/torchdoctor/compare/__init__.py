"""Before/after comparison of run directories (`torchdoctor compare`)."""
