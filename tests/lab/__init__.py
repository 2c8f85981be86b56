"""Tests of posenc.lab."""
