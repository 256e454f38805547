"""Harness measurements: calibration power and truth, harness overhead, serve soak."""
