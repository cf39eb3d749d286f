"""Measure: noise on simulated records, spectra, derivatives, and robots' logs (read, resampled, filtered)."""
