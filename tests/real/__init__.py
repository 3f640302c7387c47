"""Tests of the real backend."""
