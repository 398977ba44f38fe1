"""Rules turn a RunRecord into Findings. They are pure: no printing, no measuring."""
