"""Probes observe a live run and write measurements into the RunRecord; they never judge."""
