"""Bridges that put posenc's exact encodings inside other libraries' models."""
