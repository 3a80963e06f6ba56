"""Built-in numpy models with hand-derived gradients (checked by finite differences in tests).

Each model is a pair of pure functions over the rows a worker pulled from the PS:
`forward(...)` gives logits or predictions, `loss_and_gradients(...)` the batch loss and the
gradient for every gathered row (one per occurrence; the PS client sums duplicate ids).
"""
