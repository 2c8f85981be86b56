"""The length-generalisation lab: measure seed 004's comparison table instead of repeating it.

Train every registered encoding in the same small transformer, with the same budget and seeds, on
byte-level language modelling of the Python standard library's source and on algorithmic tasks
(copy, reverse, addition, sort, summation, parity); evaluate at L, 2L, 4L, 8L; record every run in
sqlite; report the measured table next to the seed's claims and the mean reciprocal rank next to
Kazemnejad et al.'s (2023). ``python -m posenc.lab run --preset smoke`` then ``python -m posenc.lab report``.
"""
